//! Elections with a pre-vote, and a leader that stops leading without a quorum.
//!
//! openraft 0.9 has neither: a voter whose election timer fires raises its term
//! at once, so a follower that restarts (or comes back from a partition) and
//! misses a heartbeat or two deposes a healthy leader (term +2, writes refused
//! for half a second); and a leader cut off from its quorum keeps reporting
//! itself leader. What the pinned version offers and is used here: the
//! followers' leader lease (a vote request within its `election_timeout_max`
//! of the last heartbeat is refused; a heartbeat shorter than our lease, as a
//! backstop), `runtime_config().elect(false)` to switch its own
//! election timer off, `trigger().elect()` to campaign on demand, and
//! `millis_since_quorum_ack` on the leader.
//!
//! So elections are driven here (raft thesis §9.6, etcd's PreVote): a voter that
//! has not heard from a leader for a randomized timeout first asks the other
//! voters whether they would vote for it in the next term, without anyone
//! changing term. A voter says yes only if it has not heard from a leader for
//! at least the lease itself, is not a leader with a fresh quorum, is in an
//! older term, and the candidate's log is at least as complete as its own.
//! Only with a majority of yeses does the voter campaign for real.
//!
//! A leader whose quorum has not acknowledged it for [`RaftTiming::step_down_ms`]
//! is not the leader for anyone using this crate: its status says so, and it
//! refuses writes and reads (nothing is proposed). openraft itself demotes it
//! when it next hears the higher term of the majority's leader.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use openraft::ServerState;
use rand::Rng;
use serde::{Deserialize, Serialize};
use tracing::{debug, info, warn};

use super::log_store::LogStore;
use super::node::RaftTiming;
use super::types::Raft;
use crate::rpc::{Request, RpcClient, Target};

/// The longest the election loop sleeps with nothing to time (a leader, a
/// server that is no voter): it wakes on any change of leader, term or
/// membership anyway; this only bounds a missed one.
const IDLE_RECHECK: Duration = Duration::from_secs(1);

/// Method name of the pre-vote.
pub(crate) const PREVOTE: &str = "raft.prevote";

/// "Would you vote for me in `term`?"
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PreVoteRequest {
    /// The asking voter (raft id).
    pub candidate: u64,
    /// The term it would campaign in (its current term + 1).
    pub term: u64,
    /// Its last log entry (term, index).
    pub last_log: Option<(u64, u64)>,
}

/// The answer, with the reason (logged by the candidate).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct PreVoteResponse {
    /// Yes or no.
    pub granted: bool,
    /// Why.
    pub reason: String,
    /// A no only because this voter heard a leader within its lease: what is
    /// left of the lease (ms). Absent from older servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_left_ms: Option<u64>,
}

/// What the other voters said to a pre-vote.
#[derive(Debug, Default, PartialEq, Eq)]
struct Tally {
    yes: usize,
    /// The longest lease left among those that refused for their lease.
    lease_left_ms: Option<u64>,
}

impl RaftTiming {
    /// The followers' leader lease: no pre-vote within this of a heartbeat. It
    /// is the bottom of the election range, as etcd's CheckQuorum lease is its
    /// base election timeout.
    pub fn lease_ms(&self) -> u64 {
        self.election_min_ms
    }

    /// openraft's own lease on real votes (its `election_timeout_max`, its
    /// timer being off): a heartbeat shorter than [`Self::lease_ms`]. The
    /// pre-vote is what keeps a voter that heard the leader from being
    /// disturbed; this backstop must not refuse the vote that follows a
    /// granted pre-vote because the voter's copy of the last heartbeat was
    /// handled a few milliseconds after the candidate's.
    pub fn vote_lease_ms(&self) -> u64 {
        self.lease_ms()
            .saturating_sub(self.heartbeat_ms)
            .max(self.heartbeat_ms + 2)
    }

    /// This voter's pre-vote timeout after the last word from a leader, as
    /// `lo + frac × (hi − lo)` with `frac` a fresh random draw in [0, 1].
    ///
    /// The election range is split into one band per voter that may campaign
    /// (`bands`), and a voter draws only from the first quarter of its own band
    /// (`rank`): when the leader dies, the first survivor fires early in the
    /// range and the next one at least three quarters of a band later, instead
    /// of both drawing from the whole range (the first of two uniform draws
    /// comes a third into it, and two close draws split the vote). Bands per
    /// priority, as in scylladb's preferred-leader review (scylladb#30329).
    /// Voters that disagree on their ranks (one restarted and knows no leader)
    /// may share a band; the pre-vote and a new term's ranks sort that out.
    pub fn prevote_timeout_ms(&self, rank: usize, bands: usize, frac: f64) -> u64 {
        let lo = self.election_min_ms;
        let span = self.election_max_ms.saturating_sub(lo).max(1);
        let bands = bands.max(1) as u64;
        let rank = (rank as u64).min(bands - 1);
        let width = span / bands;
        lo + rank * width + ((width / 4) as f64 * frac.clamp(0.0, 1.0)) as u64
    }

    /// A leader not acknowledged by a quorum for this long stops leading.
    pub fn step_down_ms(&self) -> u64 {
        2 * self.election_max_ms + self.heartbeat_ms
    }
}

/// Since when this server has not heard from a leader (appends, snapshots) or
/// granted a vote.
#[derive(Debug)]
pub(crate) struct Contact(Mutex<Instant>);

impl Contact {
    fn new() -> Self {
        Self(Mutex::new(Instant::now()))
    }

    /// Heard from a leader (or voted) now.
    pub fn touch(&self) {
        if let Ok(mut t) = self.0.lock() {
            *t = Instant::now();
        }
    }

    /// Time since then.
    pub fn elapsed(&self) -> Duration {
        self.0.lock().map(|t| t.elapsed()).unwrap_or(Duration::MAX)
    }

    /// What is left of `timeout` after then.
    pub fn remaining(&self, timeout: Duration) -> Duration {
        timeout.saturating_sub(self.elapsed())
    }
}

/// Pre-vote state and the election driver of one server.
pub(crate) struct Elections {
    raft: Raft,
    log: LogStore,
    rpc: Arc<RpcClient>,
    timing: RaftTiming,
    /// When this server last heard from a leader.
    pub contact: Contact,
    /// Set when this server refused a pre-vote only because its own log is
    /// ahead of the candidate's: the leader is gone for it too (its lease had
    /// run out), and a candidate that can win should not wait its own band.
    hastened: AtomicBool,
    hasten: tokio::sync::Notify,
    /// For the once-a-second slow-append warning.
    started: Instant,
    slow_logged_ms: AtomicU64,
}

/// Whether a message carrying `theirs` comes from a leader this server follows
/// or must follow: a committed (elected) vote, not older than its own.
fn from_a_leader_we_follow(theirs: &super::types::Vote, mine: &super::types::Vote) -> bool {
    theirs.is_committed() && theirs >= mine
}

/// This voter's place among the voters that may campaign when the leader
/// it follows is gone: all voters but that leader, in id order turned by the
/// term (so the first to campaign changes from one leadership to the next),
/// and how many there are. Every follower of the same leader in the same term
/// computes the same order.
fn campaign_rank(me: u64, voters: &[u64], leader: Option<u64>, term: u64) -> (usize, usize) {
    let mut may: Vec<u64> = voters
        .iter()
        .copied()
        .filter(|v| Some(*v) != leader || *v == me)
        .collect();
    may.sort_unstable();
    may.dedup();
    let n = may.len().max(1);
    let at = may.iter().position(|v| *v == me).unwrap_or(0);
    ((at + n - (term % n as u64) as usize) % n, n)
}

/// The (term, index) of a log id.
fn pos(l: &super::types::LogId) -> (u64, u64) {
    (l.leader_id.term, l.index)
}

impl Elections {
    /// Switches openraft's own election timer off; [`Self::run`] drives elections.
    pub fn new(raft: Raft, log: LogStore, rpc: Arc<RpcClient>, timing: RaftTiming) -> Self {
        raft.runtime_config().elect(false);
        Self {
            raft,
            log,
            rpc,
            timing,
            contact: Contact::new(),
            hastened: AtomicBool::new(false),
            hasten: tokio::sync::Notify::new(),
            started: Instant::now(),
            slow_logged_ms: AtomicU64::new(0),
        }
    }

    /// An append arrived: it is word from the leader this server follows (or a
    /// newer one) when its vote is committed and not older than ours. It counts
    /// on arrival, as etcd's followers reset their election timer on a leader's
    /// message: answering it may wait behind this server's disk, and a leader
    /// heard all along is not a reason to campaign. (Counted only on the answer,
    /// 500 simulated agents' reports made followers that did hear the leader
    /// win pre-votes against it, one term after another.)
    pub fn heard_append(&self, vote: &super::types::Vote) {
        let mine = self.raft.metrics().borrow().vote;
        if from_a_leader_we_follow(vote, &mine) {
            self.contact.touch();
        }
    }

    /// How long this server took to append (and answer) a leader's entries; over
    /// the heartbeat, the leader has given up on the answer (openraft's
    /// AppendEntries timeout is the heartbeat), so it is logged, at most once a
    /// second.
    pub fn append_took(&self, took: Duration, entries: usize) {
        let limit = Duration::from_millis(self.timing.heartbeat_ms);
        if took <= limit {
            return;
        }
        let now = self.started.elapsed().as_millis() as u64;
        let last = self.slow_logged_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= 1000)
            && self
                .slow_logged_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(
                took_ms = took.as_millis() as u64,
                entries,
                heartbeat_ms = self.timing.heartbeat_ms,
                "appending a leader's entries took longer than the heartbeat: the leader has stopped waiting for this answer"
            );
        }
    }

    /// Milliseconds a leader has gone without a quorum's acknowledgement, when it
    /// is a leader of several voters past [`RaftTiming::step_down_ms`].
    pub fn quorum_lost_ms(&self) -> Option<u64> {
        let m = self.raft.metrics().borrow().clone();
        if m.state != ServerState::Leader || m.membership_config.voter_ids().count() < 2 {
            return None;
        }
        match m.millis_since_quorum_ack {
            Some(ms) if ms <= self.timing.step_down_ms() => None,
            Some(ms) => Some(ms),
            // Never acknowledged in this leadership (e.g. restarted as the leader
            // of a term the others left): not a leader anyone follows.
            None => Some(u64::MAX),
        }
    }

    /// Answers a pre-vote request.
    pub fn answer(&self, req: &PreVoteRequest) -> PreVoteResponse {
        let m = self.raft.metrics().borrow().clone();
        let no = |reason: String| PreVoteResponse {
            granted: false,
            reason,
            lease_left_ms: None,
        };
        if m.state == ServerState::Leader {
            if let Some(ms) = m.millis_since_quorum_ack
                && ms <= self.timing.lease_ms()
            {
                return no(format!(
                    "I lead term {} and a quorum acknowledged me {ms} ms ago",
                    m.current_term
                ));
            }
        } else {
            let heard = self.contact.elapsed();
            let lease = Duration::from_millis(self.timing.lease_ms());
            if heard < lease {
                return PreVoteResponse {
                    lease_left_ms: Some((lease - heard).as_millis() as u64 + 1),
                    ..no(format!(
                        "I heard from the leader {} ms ago",
                        heard.as_millis()
                    ))
                };
            }
        }
        if req.term <= m.current_term {
            return no(format!(
                "my term {} is not older than {}",
                m.current_term, req.term
            ));
        }
        let mine = self.log.last_log_id().ok().flatten().map(|l| pos(&l));
        if req.last_log < mine {
            // Every other check passed: the leader is gone for this voter too,
            // and its own log could win where the candidate's cannot.
            self.hastened.store(true, Ordering::Relaxed);
            self.hasten.notify_one();
            return no(format!(
                "my log {mine:?} is ahead of yours {:?}",
                req.last_log
            ));
        }
        PreVoteResponse {
            granted: true,
            reason: "granted".into(),
            lease_left_ms: None,
        }
    }

    /// Drives elections until raft stops: a voter without a leader for a
    /// randomized timeout campaigns once a majority granted its pre-vote.
    pub async fn run(self: Arc<Self>) {
        // Where in its band this voter fires, drawn anew after each attempt.
        let mut frac: f64 = rand::rng().random();
        // The earliest time for this voter's next attempt, besides `timeout` after
        // the last word from a leader. Kept apart from `contact`, which other
        // voters' pre-votes are judged by: touching that on our own attempt made a
        // lagging voter that lost its pre-vote refuse the up-to-date one's.
        let mut not_before: Option<Instant> = None;
        // Leader, term and membership: what the timeout depends on, sent by
        // openraft only when one of them changes.
        let mut server = self.raft.server_metrics();
        loop {
            // Seen before reading, so that a change after the read still wakes.
            server.borrow_and_update();
            let m = self.raft.metrics().borrow().clone();
            let voters: Vec<u64> = m.membership_config.voter_ids().collect();
            let (rank, bands) = campaign_rank(m.id, &voters, m.current_leader, m.current_term);
            let timeout = Duration::from_millis(self.timing.prevote_timeout_ms(rank, bands, frac));
            // Wakes when the timeout runs out rather than on a coarse tick (a 20 ms
            // tick added 10 ms to the median failover), and at once on a new
            // leader, term or membership. A leader (or a server that is no voter)
            // times nothing: it waits for such a change. (It woke every 20 ms
            // before: 50 wake-ups a second and two metrics clones each on every
            // server at rest, the largest part of an idle agent's CPU.) A word
            // from the leader moves the timeout later, never earlier, so waking
            // at the old one only re-reads it.
            let candidate = voters.contains(&m.id) && m.state != ServerState::Leader;
            let nap = if candidate && voters.len() == 1 {
                Duration::from_millis(1) // the only voter elects itself below
            } else if candidate {
                self.contact
                    .remaining(timeout)
                    .max(
                        not_before
                            .map(|t| t.saturating_duration_since(Instant::now()))
                            .unwrap_or_default(),
                    )
                    .clamp(Duration::from_millis(1), IDLE_RECHECK)
            } else {
                IDLE_RECHECK
            };
            tokio::select! {
                _ = tokio::time::sleep(nap) => {}
                _ = self.hasten.notified() => {}
                changed = server.changed() => {
                    if changed.is_err() {
                        return; // raft stopped
                    }
                }
            }
            let m = self.raft.metrics().borrow().clone();
            if m.running_state.is_err() || m.state == ServerState::Shutdown {
                return;
            }
            let voters: Vec<u64> = m.membership_config.voter_ids().collect();
            if !voters.contains(&m.id) || m.state == ServerState::Leader {
                continue;
            }
            if voters.len() == 1 {
                // The only voter needs nobody's vote.
                let _ = self.raft.trigger().elect().await;
                tokio::time::sleep(Duration::from_millis(self.timing.election_min_ms)).await;
                continue;
            }
            // A refused candidate behind us: campaign now, if no leader was heard
            // within the lease since (the refusal came after the lease ran out).
            let hastened = self.hastened.swap(false, Ordering::Relaxed)
                && self.contact.elapsed() >= Duration::from_millis(self.timing.lease_ms());
            if !hastened
                && (self.contact.elapsed() < timeout
                    || not_before.is_some_and(|t| Instant::now() < t))
            {
                continue;
            }
            frac = rand::rng().random();
            let attempt = Instant::now();
            let peers: BTreeMap<u64, String> = m
                .membership_config
                .nodes()
                .filter(|(id, _)| **id != m.id && voters.contains(id))
                .map(|(id, n)| (*id, format!("{}@{}", n.node_id, n.rpc_addr)))
                .collect();
            let req = PreVoteRequest {
                candidate: m.id,
                term: m.current_term + 1,
                last_log: self.log.last_log_id().ok().flatten().map(|l| pos(&l)),
            };
            // This voter's own yes counts; it needs a majority of all voters.
            let need = voters.len() / 2;
            let tally = self.ask(&m, &req, need).await;
            let granted = 1 + tally.yes;
            // A lost pre-vote waits a new timeout before the next one, or only until
            // the leases that refused it run out.
            not_before = Some(
                attempt
                    + match tally.lease_left_ms {
                        Some(ms) => Duration::from_millis(ms).min(timeout),
                        None => timeout,
                    },
            );
            if granted * 2 > voters.len() {
                info!(
                    term = req.term,
                    granted,
                    voters = voters.len(),
                    "pre-vote won; campaigning"
                );
                let _ = self.raft.trigger().elect().await;
            } else {
                debug!(
                    term = req.term,
                    granted,
                    ?peers,
                    "pre-vote lost; not campaigning"
                );
            }
        }
    }

    /// Asks the other voters; the yeses, counted as answers arrive and returned
    /// as soon as `need` said yes or can no longer (a dead voter is not waited
    /// for once the others decided), and the longest lease left among the
    /// voters that refused for their lease.
    async fn ask(
        &self,
        m: &openraft::RaftMetrics<u64, super::types::RaftPeer>,
        req: &PreVoteRequest,
        need: usize,
    ) -> Tally {
        let Ok(body) = serde_json::to_value(req) else {
            return Tally::default();
        };
        let wait = Duration::from_millis(self.timing.election_min_ms.max(100));
        let voters: Vec<u64> = m.membership_config.voter_ids().collect();
        let asks = m
            .membership_config
            .nodes()
            .filter(|(id, _)| **id != m.id && voters.contains(id))
            .map(|(_, n)| n.clone())
            .filter_map(|n| {
                let addr = n.rpc_addr.parse().ok()?;
                Some(Target::new(addr, n.node_id))
            })
            .map(|t| {
                let r = Request::new(PREVOTE, body.clone());
                async move {
                    let answer = self.rpc.call(&t, &r, wait).await;
                    let answer = answer
                        .ok()
                        .and_then(|v| serde_json::from_value::<PreVoteResponse>(v).ok());
                    if let Some(a) = answer.as_ref().filter(|a| !a.granted) {
                        debug!(voter = %t.node, reason = %a.reason, "pre-vote refused");
                    }
                    answer
                }
            });
        let mut pending: futures::stream::FuturesUnordered<_> = asks.collect();
        let others = pending.len();
        let mut tally = Tally::default();
        let mut no = 0;
        while let Some(answer) = futures::StreamExt::next(&mut pending).await {
            if tally.count(answer.as_ref()) {
                no += 1;
            }
            if tally.yes >= need || others - no < need {
                break;
            }
        }
        tally
    }
}

impl Tally {
    /// Counts one voter's answer (none: it did not answer); true for a no.
    fn count(&mut self, answer: Option<&PreVoteResponse>) -> bool {
        match answer {
            Some(a) if a.granted => {
                self.yes += 1;
                false
            }
            Some(PreVoteResponse {
                lease_left_ms: Some(ms),
                ..
            }) => {
                self.lease_left_ms = Some(self.lease_left_ms.unwrap_or(0).max(*ms));
                true
            }
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::types::Vote;

    fn elected(term: u64, node: u64) -> Vote {
        let mut v = Vote::new(term, node);
        v.commit();
        v
    }

    fn answer(granted: bool, lease_left_ms: Option<u64>) -> PreVoteResponse {
        PreVoteResponse {
            granted,
            reason: String::new(),
            lease_left_ms,
        }
    }

    #[test]
    fn a_tally_keeps_the_longest_lease_left_of_the_refusals() {
        let mut t = Tally::default();
        assert!(!t.count(Some(&answer(true, None))), "a yes");
        assert!(t.count(Some(&answer(false, Some(3)))), "a lease");
        assert!(t.count(Some(&answer(false, Some(7)))));
        assert!(t.count(Some(&answer(false, Some(5)))));
        assert!(t.count(Some(&answer(false, None))), "another reason");
        assert!(t.count(None), "no answer");
        assert_eq!(
            t,
            Tally {
                yes: 1,
                lease_left_ms: Some(7)
            }
        );
    }

    #[test]
    fn the_timer_is_the_election_range_and_openraft_lease_is_shorter() {
        let t = RaftTiming {
            heartbeat_ms: 60,
            election_min_ms: 300,
            election_max_ms: 600,
        };
        assert_eq!(t.prevote_timeout_ms(0, 2, 0.0), 300);
        assert_eq!(t.prevote_timeout_ms(0, 2, 1.0), 337);
        assert_eq!(t.prevote_timeout_ms(1, 2, 0.0), 450);
        assert_eq!(t.prevote_timeout_ms(1, 2, 1.0), 487);
        // Never past the range, whatever the rank or the draw.
        for bands in 1..6 {
            for rank in 0..8 {
                for frac in [0.0, 0.5, 1.0, 7.0] {
                    let ms = t.prevote_timeout_ms(rank, bands, frac);
                    assert!((300..=600).contains(&ms), "{rank}/{bands} {frac}: {ms}");
                }
            }
        }
        assert_eq!(t.lease_ms(), 300);
        assert_eq!(t.vote_lease_ms(), 240);
        let tight = RaftTiming {
            heartbeat_ms: 100,
            election_min_ms: 101,
            election_max_ms: 102,
        };
        assert!(tight.vote_lease_ms() > tight.heartbeat_ms);
    }

    #[test]
    fn the_followers_of_a_leader_agree_on_distinct_ranks_that_turn_with_the_term() {
        let voters = [3, 1, 2];
        for term in 0..6 {
            // Leader 1 gone: 2 and 3 campaign one after the other.
            let r2 = campaign_rank(2, &voters, Some(1), term);
            let r3 = campaign_rank(3, &voters, Some(1), term);
            assert_eq!((r2.1, r3.1), (2, 2));
            assert_ne!(r2.0, r3.0, "term {term}");
            // No leader known (start, or a lost election): three bands.
            let all: Vec<usize> = voters
                .iter()
                .map(|v| campaign_rank(*v, &voters, None, term).0)
                .collect();
            let mut sorted = all.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 1, 2], "term {term}");
        }
        assert_ne!(
            campaign_rank(2, &voters, Some(1), 4).0,
            campaign_rank(2, &voters, Some(1), 5).0,
            "the first to campaign changes with the term"
        );
    }

    #[test]
    fn a_pre_vote_answer_from_an_older_server_reads_without_the_lease() {
        let a: PreVoteResponse =
            serde_json::from_str(r#"{"granted":false,"reason":"x"}"#).expect("old answer");
        assert_eq!(a.lease_left_ms, None);
    }

    #[test]
    fn only_an_elected_leader_not_older_than_ours_counts_as_heard() {
        let mine = elected(3, 1);
        assert!(from_a_leader_we_follow(&elected(3, 1), &mine), "our leader");
        assert!(
            from_a_leader_we_follow(&elected(4, 2), &mine),
            "a newer leader"
        );
        assert!(
            !from_a_leader_we_follow(&elected(2, 2), &mine),
            "a deposed leader"
        );
        assert!(
            !from_a_leader_we_follow(&Vote::new(4, 2), &mine),
            "a candidate"
        );
        // Having voted for a candidate, its election (same term, now committed) counts.
        assert!(from_a_leader_we_follow(&elected(4, 2), &Vote::new(4, 2)));
    }
}
