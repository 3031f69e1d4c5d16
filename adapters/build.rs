//! Enables the real-cluster Kubernetes tests when KUBECONFIG is set at
//! build time; without it they are compiled as ignored (and counted so).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(daros_kube_cluster)");
    println!("cargo::rerun-if-env-changed=KUBECONFIG");
    if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=daros_kube_cluster");
    }
}
