//! The peer: N `serf agent` processes (Debian's serf, HashiCorp's SWIM gossip under Consul and
//! Nomad) on loopback, LAN profile, encrypted, driven and observed through Serf's own RPC
//! (msgpack over TCP): every agent streams its member events to this harness, so the moment each
//! agent learns a change is seen when it happens, not polled.

use std::collections::HashSet;
use std::io::{BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use rmpv::Value;

use super::wire::{self, GOSSIP_BASE, RPC_BASE, WireCounter};
use super::{Figures, Scenario, Window};

/// A member event one agent reported.
struct Event {
    agent: usize,
    kind: Kind,
    member: usize,
    marker: Option<String>,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Join,
    Failed,
    Update,
}

fn name(i: usize) -> String {
    format!("s-{i:04}")
}

fn index(name: &str) -> Option<usize> {
    name.strip_prefix("s-")?.parse().ok()
}

fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .map(|(k, v)| (Value::from(k), v))
            .collect(),
    )
}

fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// One RPC connection to an agent, after the handshake.
struct Rpc {
    w: BufWriter<TcpStream>,
    r: BufReader<TcpStream>,
    seq: u64,
}

impl Rpc {
    fn connect(i: usize, deadline: Duration) -> Rpc {
        let t = Instant::now();
        let s = loop {
            match TcpStream::connect(("127.0.0.1", RPC_BASE + i as u16)) {
                Ok(s) => break s,
                Err(_) if t.elapsed() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("serf agent {i} RPC: {e}"),
            }
        };
        s.set_nodelay(true).unwrap();
        let mut rpc = Rpc {
            w: BufWriter::new(s.try_clone().unwrap()),
            r: BufReader::new(s),
            seq: 0,
        };
        rpc.call("handshake", map(vec![("Version", Value::from(1))]));
        rpc
    }

    fn send(&mut self, cmd: &str, body: Value) -> u64 {
        let seq = self.seq;
        self.seq += 1;
        let head = map(vec![
            ("Command", Value::from(cmd)),
            ("Seq", Value::from(seq)),
        ]);
        rmpv::encode::write_value(&mut self.w, &head).unwrap();
        rmpv::encode::write_value(&mut self.w, &body).unwrap();
        self.w.flush().unwrap();
        seq
    }

    /// A command whose answer is a header alone (handshake, tags, stream's acknowledgement).
    fn call(&mut self, cmd: &str, body: Value) {
        self.send(cmd, body);
        let head = rmpv::decode::read_value(&mut self.r).unwrap();
        let err = get(&head, "Error").and_then(Value::as_str).unwrap_or("");
        assert!(err.is_empty(), "serf {cmd}: {err}");
    }

    /// A command answered by a header and a body (join).
    fn call_body(&mut self, cmd: &str, body: Value) -> Value {
        self.call(cmd, body);
        rmpv::decode::read_value(&mut self.r).unwrap()
    }

    /// Subscribes to `types` and forwards every event to `tx` from a thread of its own, until
    /// the connection closes.
    fn stream(mut self, agent: usize, types: &str, tx: Sender<Event>) -> TcpStream {
        self.call("stream", map(vec![("Type", Value::from(types))]));
        let keep = self.r.get_ref().try_clone().unwrap();
        std::thread::Builder::new()
            .stack_size(128 << 10)
            .spawn(move || {
                while let Ok(_head) = rmpv::decode::read_value(&mut self.r) {
                    let Ok(body) = rmpv::decode::read_value(&mut self.r) else {
                        return;
                    };
                    let kind = match get(&body, "Event").and_then(Value::as_str) {
                        Some("member-join") => Kind::Join,
                        Some("member-failed") => Kind::Failed,
                        Some("member-update") => Kind::Update,
                        _ => continue,
                    };
                    let members = get(&body, "Members").and_then(Value::as_array);
                    for m in members.into_iter().flatten() {
                        let Some(member) = get(m, "Name").and_then(Value::as_str).and_then(index)
                        else {
                            continue;
                        };
                        let marker = get(m, "Tags")
                            .and_then(|t| get(t, "usage"))
                            .and_then(Value::as_str)
                            .map(str::to_string);
                        let ev = Event {
                            agent,
                            kind,
                            member,
                            marker,
                        };
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                }
            })
            .unwrap();
        keep
    }
}

/// The agents this run started, killed by pid on drop.
struct Agents(Vec<Option<Child>>);

impl Drop for Agents {
    fn drop(&mut self) {
        for c in self.0.iter_mut().flatten() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Agents {
    fn pids(&self) -> Vec<u32> {
        self.0.iter().flatten().map(Child::id).collect()
    }

    fn cpu(&self) -> f64 {
        self.pids().into_iter().map(wire::cpu_secs).sum()
    }
}

fn key() -> String {
    use std::io::Read;
    let mut k = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut k)
        .unwrap();
    // Base64 without a crate: serf wants standard padding.
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in k.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for j in 0..4 {
            if j <= c.len() {
                s.push(A[(n >> (18 - 6 * j) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

pub fn version() -> String {
    Command::new("serf")
        .arg("version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

pub fn run(sc: &Scenario) -> Figures {
    let n = sc.nodes;
    let counter = WireCounter::install(n);
    let key = key();
    let (tx, rx) = channel();
    let mut agents = Agents(Vec::new());
    let mut cmd = Vec::new();
    let mut keep = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        let mut c = Command::new("serf");
        c.args(["agent", "-node", &name(i)])
            .arg(format!("-bind=127.0.0.1:{}", GOSSIP_BASE + i as u16))
            .arg(format!("-rpc-addr=127.0.0.1:{}", RPC_BASE + i as u16))
            .arg(format!("-encrypt={key}"))
            .args(["-log-level", "err", "-profile", "lan"])
            // One OS thread of Go code per agent: a node of a fleet has its own cores, here
            // N agents share two (the Go default would start a scheduler thread per core).
            .env("GOMAXPROCS", "1");
        for (k, v) in sc.tags(i, 0) {
            c.arg("-tag").arg(format!("{k}={v}"));
        }
        agents.0.push(Some(
            c.stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        ));
        // Subscribe before joining: every join this agent learns of is reported.
        let events = Rpc::connect(i, Duration::from_secs(30));
        keep.push(events.stream(i, "member-join,member-failed", tx.clone()));
        let mut c = Rpc::connect(i, Duration::from_secs(5));
        if i > 0 {
            let seeds: Vec<Value> = (0..i.min(3))
                .map(|s| Value::from(format!("127.0.0.1:{}", GOSSIP_BASE + s as u16)))
                .collect();
            c.call_body(
                "join",
                map(vec![
                    ("Existing", Value::Array(seeds)),
                    ("Replay", false.into()),
                ]),
            );
        }
        cmd.push(c);
    }
    let started = t0.elapsed();
    let mut joined: Vec<HashSet<usize>> = vec![HashSet::new(); n];
    let mut complete = 0;
    let mut told = Instant::now();
    while complete < n {
        if told.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "serf: {complete} of {n} agents see all others after {:.0} s",
                t0.elapsed().as_secs_f64()
            );
            told = Instant::now();
        }
        let ev = recv(
            &rx,
            Duration::from_secs(300),
            "every agent sees every other",
        );
        if ev.kind == Kind::Join
            && ev.member != ev.agent
            && joined[ev.agent].insert(ev.member)
            && joined[ev.agent].len() == n - 1
        {
            complete += 1;
        }
    }
    let cold = t0.elapsed();
    let rss = agents.pids().into_iter().map(wire::rss_bytes).sum::<u64>() as f64 / n as f64;

    std::thread::sleep(sc.settle);
    let idle = window(sc, &counter, &agents, &mut cmd, false);

    // One update at a time: a node changes its usage tag; until every other agent reported it.
    let (utx, urx) = channel();
    let streams: Vec<TcpStream> = (0..n)
        .map(|i| Rpc::connect(i, Duration::from_secs(5)).stream(i, "member-update", utx.clone()))
        .collect();
    let mut update_ms = Vec::new();
    for trial in 0..sc.updates {
        let who = (trial * 37) % n;
        let tags = sc.tags(who, 1_000_000 + trial as u64);
        let marker = tags.iter().find(|(k, _)| *k == "usage").unwrap().1.clone();
        let t = Instant::now();
        set_tags(&mut cmd[who], &tags);
        let mut seen = HashSet::new();
        while seen.len() < n - 1 {
            let ev = recv(&urx, Duration::from_secs(60), "an update seen everywhere");
            if ev.member == who && ev.agent != who && ev.marker.as_deref() == Some(&marker) {
                seen.insert(ev.agent);
            }
        }
        update_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    for s in streams {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }

    let churn = window(sc, &counter, &agents, &mut cmd, true);

    // Detection: kill -9 a member; until every live agent reported it failed.
    let mut detect_ms = Vec::new();
    let mut dead = HashSet::new();
    while rx.try_recv().is_ok() {}
    for k in 0..sc.kills {
        let victim = sc.victim(k);
        if let Some(mut c) = agents.0[victim].take() {
            let t = Instant::now();
            let _ = c.kill();
            let _ = c.wait();
            dead.insert(victim);
            let mut seen = HashSet::new();
            while seen.len() < n - dead.len() {
                let ev = recv(
                    &rx,
                    Duration::from_secs(180),
                    "a killed member failed everywhere",
                );
                if ev.kind == Kind::Failed && ev.member == victim && !dead.contains(&ev.agent) {
                    seen.insert(ev.agent);
                }
            }
            detect_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    drop(keep);
    Figures {
        nodes: n,
        started_s: started.as_secs_f64(),
        cold_start_s: cold.as_secs_f64(),
        idle,
        churn,
        update_ms,
        detect_ms,
        rss_per_agent: rss,
    }
}

fn recv(rx: &Receiver<Event>, limit: Duration, what: &str) -> Event {
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("serf: no event for {limit:?} while waiting for {what}"))
}

fn set_tags(c: &mut Rpc, tags: &[(&'static str, String)]) {
    let t = Value::Map(
        tags.iter()
            .map(|(k, v)| (Value::from(*k), Value::from(v.as_str())))
            .collect(),
    );
    c.call(
        "tags",
        map(vec![("Tags", t), ("DeleteTags", Value::Array(vec![]))]),
    );
}

/// Bytes and CPU over the scenario's window; with `churn`, every agent republishes its usage
/// tag every `churn_every` (staggered), as a D-AROS agent republishes its usage.
fn window(
    sc: &Scenario,
    counter: &WireCounter,
    agents: &Agents,
    cmd: &mut [Rpc],
    churn: bool,
) -> Window {
    let (b0, c0, t0) = (counter.bytes(), agents.cpu(), Instant::now());
    let mut tick = 0u64;
    while t0.elapsed() < sc.window {
        if churn {
            for (i, c) in cmd.iter_mut().enumerate() {
                if sc.due(i, tick) {
                    set_tags(c, &sc.tags(i, tick));
                }
            }
        }
        tick += 1;
        std::thread::sleep(super::TICK);
    }
    let secs = t0.elapsed().as_secs_f64();
    Window {
        bytes_per_node_s: (counter.bytes() - b0) as f64 / secs / sc.nodes as f64,
        cpu_cores_per_agent: (agents.cpu() - c0) / secs / sc.nodes as f64,
        own_bytes_per_node_s: None,
    }
}
