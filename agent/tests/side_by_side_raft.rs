//! D-AROS's Raft beside etcd's (issue 18), in one run on the same machine:
//! three darosd servers and three etcd members (Debian's `etcd-server`), each
//! member in the same network namespace as one darosd (a bridged test
//! network), with the same raft timing — heartbeat 60 ms, election timeout
//! randomised in 300–600 ms (etcd `--election-timeout 300` draws from
//! [300, 600) and wants at least 5 heartbeats in it, so not darosd's default
//! 100 ms heartbeat; darosd `raft_election_min/max`), pre-vote on for both.
//!
//! Measured, for each system:
//! - failover: `kill -9` of the leader until a survivor names a new leader,
//!   and until a write through a survivor is acknowledged; the killed member
//!   is restarted and caught up before the next kill;
//! - small writes (a ~100-byte Tenant for darosd, a ~100-byte value for
//!   etcd) sent to the leader by 1, 16 and 64 concurrent clients: writes per
//!   second, p50 and p99 latency, and the members' CPU per 1,000 writes.
//!
//! CI runs a short version (`DAROS_SIDE_KILLS`, default 3; `DAROS_SIDE_SECS`
//! per concurrency level, default 2) and checks only that both systems
//! recover from every kill and acknowledge writes; the figures in
//! docs/benchmarks.md come from a longer run:
//! `DAROS_TEST_DAROSD=$PWD/target/release/darosd DAROS_SIDE_KILLS=20
//! DAROS_SIDE_SECS=10 cargo nextest run -p daros-agent --test
//! side_by_side_raft --no-capture` (a release darosd: etcd is a release Go
//! build). Needs root, network namespaces and `etcd` (`apt-get install
//! etcd-server`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod mesh_hosts;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::require_root;
use daros_agent::client::Client;
use http_body_util::{BodyExt, Full};
use hyper::Method;
use hyper::body::Bytes;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use mesh_hosts::form_custom;
use serde_json::{Value, json};

const RECOVER: Duration = Duration::from_secs(30);

fn env_u64(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// One etcd member, in the network namespace of one darosd host.
struct Etcd {
    name: String,
    ns: String,
    ip: String,
    dir: PathBuf,
    cluster: String,
    child: Option<Child>,
}

impl Etcd {
    fn url(&self) -> String {
        format!("http://{}:2379", self.ip)
    }

    fn start(&mut self) {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .unwrap();
        let peer = format!("http://{}:2380", self.ip);
        let child = Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.ns))
            .arg("--")
            .arg("etcd")
            .args(["--name", &self.name])
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &self.url()])
            .args(["--advertise-client-urls", &self.url()])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &self.cluster])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "daros-side-by-side"])
            .args(["--heartbeat-interval", "60", "--election-timeout", "300"])
            .args(["--pre-vote=true", "--logger=zap", "--log-level=warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd (apt-get install etcd-server)");
        self.child = Some(child);
    }

    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// An HTTP client whose connections are made inside network namespace `ns`:
/// a thread enters the namespace and runs a current-thread runtime, so every
/// socket it opens lives there.
fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce(HttpClient<HttpConnector, Full<Bytes>>) -> std::pin::Pin<Box<dyn Future<Output = T>>>
    + Send
    + 'static,
) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let fd = std::fs::File::open(&path).unwrap();
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&fd),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut c = HttpConnector::new();
        c.set_nodelay(true);
        let client = HttpClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(128)
            .build(c);
        rt.block_on(f(client))
    })
    .join()
    .unwrap()
}

async fn etcd_call(
    c: &HttpClient<HttpConnector, Full<Bytes>>,
    url: &str,
    path: &str,
    body: Value,
) -> Option<Value> {
    let req = hyper::Request::builder()
        .method(Method::POST)
        .uri(format!("{url}{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .ok()?;
    let resp = tokio::time::timeout(Duration::from_secs(2), c.request(req))
        .await
        .ok()?
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let b = resp.into_body().collect().await.ok()?.to_bytes();
    serde_json::from_slice(&b).ok()
}

fn b64(s: &str) -> String {
    use std::fmt::Write as _;
    // Small base64 encoder (etcd's JSON gateway takes bytes as base64).
    const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |a, (i, &x)| a | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = write!(out, "{}", T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn value_100() -> String {
    "x".repeat(100)
}

/// etcd: the member id answering at `url` and the leader it knows (0: none).
async fn etcd_status(
    c: &HttpClient<HttpConnector, Full<Bytes>>,
    url: &str,
) -> Option<(String, String)> {
    let v = etcd_call(c, url, "/v3/maintenance/status", json!({})).await?;
    let me = v["header"]["member_id"].as_str()?.to_string();
    let leader = v["leader"].as_str().unwrap_or("0").to_string();
    Some((me, leader))
}

async fn etcd_put(c: &HttpClient<HttpConnector, Full<Bytes>>, url: &str, key: &str) -> bool {
    etcd_call(
        c,
        url,
        "/v3/kv/put",
        json!({"key": b64(key), "value": b64(&value_100())}),
    )
    .await
    .is_some()
}

fn tenant(n: u64) -> String {
    format!(
        "apiVersion: daros.io/v1\nkind: Tenant\nmetadata: {{name: bench-{n}}}\nspec: {{quota: {{cpu: \"1\"}}}}\n"
    )
}

async fn daros_put(c: &Client, n: u64) -> bool {
    c.send_text::<Value>(Method::POST, "/v1/apps?start=false", tenant(n))
        .await
        .is_ok()
}

async fn daros_leader(c: &Client) -> Option<String> {
    let v: Value = c.get("/v1/cluster").await.ok()?;
    v["status"]["leader"].as_str().map(str::to_string)
}

fn cpu_ticks(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.split_whitespace().collect::<Vec<_>>();
            Some(rest.get(11)?.parse::<u64>().ok()? + rest.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

/// CPU ticks `pids` use over `d` while idle (their sampling, gossip,
/// heartbeats), to subtract from a run's.
fn idle_ticks(pids: &[u32], d: Duration) -> u64 {
    let t0: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    std::thread::sleep(d);
    pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - t0
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

struct Load {
    writes: u64,
    per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    cpu_ms_per_1000: f64,
}

fn summarize(lat_us: Vec<u64>, secs: f64, cpu_ticks: u64) -> Load {
    let n = lat_us.len() as u64;
    let mut ms: Vec<f64> = lat_us.iter().map(|u| *u as f64 / 1000.0).collect();
    let tick_ms = 1000.0 / rustix::param::clock_ticks_per_second() as f64;
    Load {
        writes: n,
        per_sec: n as f64 / secs,
        p50_ms: pct(&mut ms, 0.5),
        p99_ms: pct(&mut ms, 0.99),
        cpu_ms_per_1000: if n == 0 {
            f64::NAN
        } else {
            cpu_ticks as f64 * tick_ms * 1000.0 / n as f64
        },
    }
}

/// `conc` clients each writing with `put(n)` back to back for `secs`
/// seconds; the latencies (µs) of the acknowledged writes.
async fn closed_loop<F, Fut>(conc: u64, secs: u64, put: F) -> Vec<u64>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    let end = Instant::now() + Duration::from_secs(secs);
    let seq = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..conc)
        .map(|_| {
            let (seq, put) = (seq.clone(), put.clone());
            tokio::spawn(async move {
                let mut lat = Vec::new();
                while Instant::now() < end {
                    let t = Instant::now();
                    if put(seq.fetch_add(1, Ordering::Relaxed)).await {
                        lat.push(t.elapsed().as_micros() as u64);
                    }
                }
                lat
            })
        })
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all
}

/// Runs `load` (returning latencies) and summarizes it with the CPU `pids`
/// used above their idle rate, measured just before.
fn measured(pids: &[u32], secs: u64, load: impl FnOnce() -> Vec<u64>) -> Load {
    let idle = idle_ticks(pids, Duration::from_secs(secs));
    let t0: u64 = pids.iter().map(|p| cpu_ticks(*p)).sum();
    let lat = load();
    let cpu = (pids.iter().map(|p| cpu_ticks(*p)).sum::<u64>() - t0).saturating_sub(idle);
    summarize(lat, secs as f64, cpu)
}

#[test]
fn raft_beside_etcd_failover_and_writes() {
    require_root();
    assert!(
        Command::new("etcd").arg("--version").output().is_ok(),
        "etcd is needed (apt-get install etcd-server; scripts/test.sh installs it)"
    );
    let kills = env_u64("DAROS_SIDE_KILLS", 3);
    let secs = env_u64("DAROS_SIDE_SECS", 2);
    let (net, dir, mut hs) = form_custom(
        0,
        false,
        "raft_heartbeat = \"60ms\"\nraft_election_min = \"300ms\"\nraft_election_max = \"600ms\"\n",
    );
    let cluster = (0..3)
        .map(|k| format!("e{}=http://{}:2380", k + 1, net.ip(k)))
        .collect::<Vec<_>>()
        .join(",");
    let mut es: Vec<Etcd> = (0..3)
        .map(|k| {
            let d = dir.path().join(format!("e{}", k + 1));
            std::fs::create_dir_all(&d).unwrap();
            Etcd {
                name: format!("e{}", k + 1),
                ns: net.ns(k).to_string(),
                ip: net.ip(k).to_string(),
                dir: d,
                cluster: cluster.clone(),
                child: None,
            }
        })
        .collect();
    for e in &mut es {
        e.start();
    }
    let urls: Vec<String> = es.iter().map(Etcd::url).collect();
    let ns0 = net.ns(0).to_string();
    // etcd up: every member knows a leader.
    {
        let urls = urls.clone();
        in_netns(&ns0, move |c| {
            Box::pin(async move {
                let deadline = Instant::now() + RECOVER;
                loop {
                    let mut ok = 0;
                    for u in &urls {
                        if etcd_status(&c, u).await.is_some_and(|(_, l)| l != "0") {
                            ok += 1;
                        }
                    }
                    if ok == 3 {
                        break;
                    }
                    assert!(Instant::now() < deadline, "etcd did not form");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        });
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let load_before = loadavg();

    // ---- writes: leader endpoint, 1 / 16 / 64 clients ----
    let mut rows = Vec::new();
    for conc in [1u64, 16, 64] {
        // darosd
        let leader = rt
            .block_on(daros_leader(&Client::new(&hs[0].socket)))
            .unwrap();
        let li = hs.iter().position(|h| h.name == leader).unwrap();
        let pids: Vec<u32> = hs
            .iter()
            .filter_map(|h| h.child.as_ref().map(Child::id))
            .collect();
        let socket = hs[li].socket.clone();
        let d = measured(&pids, secs, || {
            rt.block_on(closed_loop(conc, secs, move |n| {
                let c = Client::new(&socket);
                // Tenant names unique across the levels.
                async move { daros_put(&c, conc * 1_000_000 + n).await }
            }))
        });
        // etcd
        let pids: Vec<u32> = es.iter().filter_map(Etcd::pid).collect();
        let urls2 = urls.clone();
        let e = measured(&pids, secs, || {
            in_netns(&ns0, move |c| {
                Box::pin(async move {
                    // The leader's client URL.
                    let mut leader_url = urls2[0].clone();
                    for u in &urls2 {
                        if let Some((me, l)) = etcd_status(&c, u).await
                            && me == l
                        {
                            leader_url = u.clone();
                        }
                    }
                    closed_loop(conc, secs, move |n| {
                        let (c, url) = (c.clone(), leader_url.clone());
                        async move { etcd_put(&c, &url, &format!("bench/{conc}/{n}")).await }
                    })
                    .await
                })
            })
        });
        assert!(
            d.writes > 0 && e.writes > 0,
            "no write acknowledged at {conc} clients"
        );
        rows.push((conc, d, e));
    }

    // ---- failover: kill -9 the leader, `kills` times each ----
    let mut daros_fo: Vec<(f64, f64)> = Vec::new();
    for i in 0..kills {
        let leader = rt.block_on(daros_leader(&Client::new(&hs[(i as usize) % 3].socket)));
        let leader = leader.unwrap();
        let k = hs.iter().position(|h| h.name == leader).unwrap();
        hs[k].kill9();
        let t0 = Instant::now();
        let survivors: Vec<PathBuf> = (0..3)
            .filter(|j| *j != k)
            .map(|j| hs[j].socket.clone())
            .collect();
        let (seen, acked) = rt.block_on(async {
            let mut seen = None;
            let mut n = 9_000_000 + i * 1000;
            loop {
                assert!(
                    t0.elapsed() < RECOVER,
                    "darosd did not recover from a leader kill"
                );
                for s in &survivors {
                    let c = Client::new(s);
                    let short = Duration::from_millis(500);
                    if seen.is_none()
                        && tokio::time::timeout(short, daros_leader(&c))
                            .await
                            .ok()
                            .flatten()
                            .is_some_and(|l| l != leader)
                    {
                        seen = Some(t0.elapsed());
                    }
                    if let Some(at) = seen {
                        n += 1;
                        let put = tokio::time::timeout(Duration::from_secs(2), daros_put(&c, n));
                        if put.await.unwrap_or(false) {
                            return (at, t0.elapsed());
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        daros_fo.push((seen.as_secs_f64() * 1000.0, acked.as_secs_f64() * 1000.0));
        let seed = hs
            .iter()
            .find(|h| h.child.is_some())
            .map(|h| format!("{}:7000", h.ip))
            .unwrap();
        hs[k].start(&seed, None);
        let back = hs[k].socket.clone();
        rt.block_on(async {
            let c = Client::new(&back);
            let t = Instant::now();
            while daros_leader(&c).await.is_none() {
                assert!(t.elapsed() < RECOVER, "restarted darosd sees no leader");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // Caught up: a write through it is acknowledged.
            let mut n = 8_000_000 + i * 1000;
            loop {
                n += 1;
                if daros_put(&c, n).await {
                    break;
                }
                assert!(t.elapsed() < RECOVER, "restarted darosd takes no write");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut etcd_fo: Vec<(f64, f64)> = Vec::new();
    for i in 0..kills {
        let urls2 = urls.clone();
        // Which member leads (by index).
        let k = in_netns(&ns0, move |c| {
            Box::pin(async move {
                for (j, u) in urls2.iter().enumerate() {
                    if let Some((me, l)) = etcd_status(&c, u).await
                        && me == l
                    {
                        return Some(j);
                    }
                }
                None
            })
        })
        .expect("an etcd leader");
        let killed_id = {
            let u = urls[k].clone();
            in_netns(&ns0, move |c| {
                Box::pin(async move { etcd_status(&c, &u).await.map(|s| s.0) })
            })
        }
        .unwrap();
        es[k].kill9();
        let t0 = Instant::now();
        let survivors: Vec<String> = (0..3)
            .filter(|j| *j != k)
            .map(|j| urls[j].clone())
            .collect();
        let r = in_netns(&ns0, move |c| {
            Box::pin(async move {
                let mut seen = None;
                let mut n = 0;
                loop {
                    assert!(
                        t0.elapsed() < RECOVER,
                        "etcd did not recover from a leader kill"
                    );
                    for u in &survivors {
                        if seen.is_none()
                            && etcd_status(&c, u)
                                .await
                                .is_some_and(|(_, l)| l != "0" && l != killed_id)
                        {
                            seen = Some(t0.elapsed());
                        }
                        if let Some(at) = seen {
                            n += 1;
                            if etcd_put(&c, u, &format!("failover/{i}/{n}")).await {
                                return (at, t0.elapsed());
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        });
        etcd_fo.push((r.0.as_secs_f64() * 1000.0, r.1.as_secs_f64() * 1000.0));
        es[k].start();
        let u = urls[k].clone();
        in_netns(&ns0, move |c| {
            Box::pin(async move {
                let t = Instant::now();
                loop {
                    if etcd_status(&c, &u).await.is_some_and(|(_, l)| l != "0")
                        && etcd_put(&c, &u, &format!("back/{i}")).await
                    {
                        break;
                    }
                    assert!(
                        t.elapsed() < RECOVER,
                        "restarted etcd member takes no write"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        });
        std::thread::sleep(Duration::from_millis(500));
    }

    // ---- report ----
    let load_after = loadavg();
    eprintln!(
        "\nside by side: darosd ({}) vs {}, same run; load {load_before} -> {load_after}",
        mesh_hosts::darosd_binary().display(),
        etcd_version()
    );
    eprintln!(
        "| clients | darosd writes/s | etcd writes/s | ratio | darosd p50 / p99 ms | etcd p50 / p99 ms | darosd / etcd CPU ms per 1000 writes, above idle |"
    );
    eprintln!("|---|---|---|---|---|---|---|");
    for (c, d, e) in &rows {
        eprintln!(
            "| {c} | {:.0} | {:.0} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} | {:.0} / {:.0} |",
            d.per_sec,
            e.per_sec,
            d.per_sec / e.per_sec,
            d.p50_ms,
            d.p99_ms,
            e.p50_ms,
            e.p99_ms,
            d.cpu_ms_per_1000,
            e.cpu_ms_per_1000
        );
    }
    let fo = |v: &[(f64, f64)], which: usize| {
        let mut x: Vec<f64> = v
            .iter()
            .map(|t| if which == 0 { t.0 } else { t.1 })
            .collect();
        (pct(&mut x.clone(), 0.5), pct(&mut x, 0.99))
    };
    let (dl50, dl99) = fo(&daros_fo, 0);
    let (dw50, dw99) = fo(&daros_fo, 1);
    let (el50, el99) = fo(&etcd_fo, 0);
    let (ew50, ew99) = fo(&etcd_fo, 1);
    eprintln!(
        "\n| {kills} leader kills each | new leader seen, median / p99 ms | write acknowledged, median / p99 ms |"
    );
    eprintln!("|---|---|---|");
    eprintln!("| darosd | {dl50:.0} / {dl99:.0} | {dw50:.0} / {dw99:.0} |");
    eprintln!("| etcd | {el50:.0} / {el99:.0} | {ew50:.0} / {ew99:.0} |");
    eprintln!(
        "| ratio darosd / etcd | {:.2} / {:.2} | {:.2} / {:.2} |",
        dl50 / el50,
        dl99 / el99,
        dw50 / ew50,
        dw99 / ew99
    );
    // Each kill's "new leader seen", sorted: the shape behind the percentiles.
    for (who, v) in [("darosd", &daros_fo), ("etcd", &etcd_fo)] {
        let mut ms: Vec<u64> = v.iter().map(|t| t.0.round() as u64).collect();
        ms.sort_unstable();
        eprintln!("{who} new leader seen, each kill (ms): {ms:?}");
    }
}

fn etcd_version() -> String {
    Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_default()
}
