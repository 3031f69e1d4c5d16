//! `daros-bpf loadgen`: TCP sender and receiver used to check accounting and caps on real
//! traffic (and by the host tests). Each side can move itself into a cgroup and a network
//! namespace before opening sockets, so its traffic is attributed like a workload's. Reports
//! are JSON lines on stdout with CLOCK_MONOTONIC timestamps (the clock of the eBPF programs).

use std::{
    fs::File,
    io::{Read, Write},
    net::{Shutdown, SocketAddr, TcpListener, TcpStream},
    os::fd::AsFd,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use anyhow::Context;
use daros_ebpf::floor_runner::monotonic_ns;
use serde_json::json;

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Send for a duration or a byte count, optionally paced.
    Send(SendArgs),
    /// Accept connections and count what arrives, sampling the total over time.
    Recv(RecvArgs),
}

#[derive(clap::Args)]
struct Placement {
    /// Move this process into the cgroup (v2 directory) first.
    #[arg(long)]
    cgroup: Option<PathBuf>,
    /// Enter the network namespace /run/netns/NAME first.
    #[arg(long)]
    netns: Option<String>,
}

#[derive(clap::Args)]
pub struct SendArgs {
    #[command(flatten)]
    place: Placement,
    /// Receiver address.
    #[arg(long)]
    connect: SocketAddr,
    /// Parallel connections.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Total pacing rate in bytes/s (default: as fast as possible).
    #[arg(long)]
    rate: Option<u64>,
    /// Stop after this many seconds.
    #[arg(long)]
    secs: Option<f64>,
    /// Stop after this many bytes in total.
    #[arg(long)]
    bytes: Option<u64>,
    /// TCP congestion control for the sockets (default: the system's).
    #[arg(long)]
    cc: Option<String>,
}

#[derive(clap::Args)]
pub struct RecvArgs {
    #[command(flatten)]
    place: Placement,
    /// Address to listen on (port 0: any; the bound address is printed first).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Connections to accept before waiting for them to finish.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Sampling interval of the running total, ms.
    #[arg(long, default_value_t = 10)]
    sample_ms: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    max_secs: u64,
}

pub fn run(cmd: Cmd) -> anyhow::Result<()> {
    match cmd {
        Cmd::Send(a) => send(a),
        Cmd::Recv(a) => recv(a),
    }
}

fn place(p: &Placement) -> anyhow::Result<()> {
    if let Some(cg) = &p.cgroup {
        daros_ebpf::cgroup::move_process(cg, std::process::id())?;
    }
    if let Some(ns) = &p.netns {
        let path = format!("/run/netns/{ns}");
        let f = File::open(&path).with_context(|| format!("opening {path}"))?;
        rustix::thread::move_into_link_name_space(
            f.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .with_context(|| format!("entering network namespace {ns}"))?;
    }
    Ok(())
}

fn send(a: SendArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.secs.is_some() || a.bytes.is_some(),
        "send needs --secs or --bytes"
    );
    anyhow::ensure!(a.streams > 0, "--streams must be at least 1");
    place(&a.place)?;
    let streams: Vec<TcpStream> = (0..a.streams)
        .map(|_| -> anyhow::Result<TcpStream> {
            let s = TcpStream::connect(a.connect)
                .with_context(|| format!("connecting to {}", a.connect))?;
            if let Some(cc) = &a.cc {
                rustix::net::sockopt::set_tcp_congestion(&s, cc)
                    .with_context(|| format!("TCP_CONGESTION {cc}"))?;
            }
            Ok(s)
        })
        .collect::<anyhow::Result<_>>()?;
    let start = monotonic_ns();
    let deadline = a.secs.map(|s| start + (s * 1e9) as u64);
    let n = a.streams as u64;
    let per_stream_bytes = a.bytes.map(|b| b / n);
    let per_stream_rate = a.rate.map(|r| (r / n).max(1));
    let handles: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            // the first stream carries the remainder of --bytes
            let budget = per_stream_bytes.map(|b| {
                if i == 0 {
                    b + a.bytes.unwrap_or(0) % n
                } else {
                    b
                }
            });
            std::thread::spawn(move || -> std::io::Result<(u64, TcpStream)> {
                let chunk = vec![0u8; 64 * 1024];
                let mut sent = 0u64;
                loop {
                    let now = monotonic_ns();
                    if deadline.is_some_and(|d| now >= d) || budget.is_some_and(|b| sent >= b) {
                        break;
                    }
                    if let Some(rate) = per_stream_rate {
                        let due =
                            start + (u128::from(sent) * 1_000_000_000 / u128::from(rate)) as u64;
                        if due > now {
                            std::thread::sleep(Duration::from_nanos((due - now).min(10_000_000)));
                            continue;
                        }
                    }
                    let len = budget
                        .map_or(chunk.len() as u64, |b| (b - sent).min(chunk.len() as u64))
                        as usize;
                    s.write_all(&chunk[..len])?;
                    sent += len as u64;
                }
                s.shutdown(Shutdown::Write)?;
                Ok((sent, s))
            })
        })
        .collect();
    let mut total = 0;
    let mut streams = Vec::with_capacity(handles.len());
    for h in handles {
        let (sent, s) = h
            .join()
            .map_err(|_| anyhow::anyhow!("sender thread panicked"))??;
        total += sent;
        streams.push(s);
    }
    let end = monotonic_ns();
    // Once the receiver has read everything and closed, TCP_INFO holds every byte this
    // side retransmitted: the datapath counts those too, so a check against the payload
    // needs them (a few lost 64 KiB skbs on a busy loopback are over 0.5 %).
    let mut retrans = 0;
    for mut s in streams {
        let _ = std::io::copy(&mut s, &mut std::io::sink());
        retrans += tcp_bytes_retrans(&s).context("TCP_INFO")?;
    }
    println!(
        "{}",
        json!({"bytes": total, "retrans_bytes": retrans, "start_ns": start, "end_ns": end})
    );
    Ok(())
}

/// `tcpi_bytes_retrans` of a connected socket (Linux 4.19 and later).
#[allow(unsafe_code)]
fn tcp_bytes_retrans(s: &TcpStream) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::tcp_info>())
        .map_err(std::io::Error::other)?;
    // SAFETY: the fd is open for the call; the kernel writes at most `len` bytes into
    // `info`, which is zeroed, so a shorter answer from an older kernel leaves zeros.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: zero-initialised and tcp_info is plain integers, so every byte pattern is valid.
    Ok(unsafe { info.assume_init() }.tcpi_bytes_retrans)
}

fn recv(a: RecvArgs) -> anyhow::Result<()> {
    place(&a.place)?;
    let listener = TcpListener::bind(a.listen).with_context(|| format!("binding {}", a.listen))?;
    println!(
        "{}",
        json!({"listening": listener.local_addr()?.to_string()})
    );
    std::io::stdout().flush()?;
    let total = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let acceptor = {
        let (total, done) = (Arc::clone(&total), Arc::clone(&done));
        std::thread::spawn(move || -> std::io::Result<()> {
            for _ in 0..a.conns {
                let (mut s, _) = listener.accept()?;
                let (total, done) = (Arc::clone(&total), Arc::clone(&done));
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 256 * 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        total.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                });
            }
            Ok(())
        })
    };
    let start = monotonic_ns();
    let limit = start + a.max_secs * 1_000_000_000;
    let mut samples = Vec::new();
    while done.load(Ordering::Relaxed) < a.conns {
        let now = monotonic_ns();
        anyhow::ensure!(now < limit, "receiver gave up after {} s", a.max_secs);
        samples.push((now, total.load(Ordering::Relaxed)));
        std::thread::sleep(Duration::from_millis(a.sample_ms));
    }
    samples.push((monotonic_ns(), total.load(Ordering::Relaxed)));
    acceptor
        .join()
        .map_err(|_| anyhow::anyhow!("acceptor panicked"))??;
    println!(
        "{}",
        json!({"bytes": total.load(Ordering::Relaxed), "samples": samples})
    );
    Ok(())
}
