//! The change bus across nodes: every change published on this node's bus (a registry change,
//! a resource update) is published on a Redis channel, and every change another node
//! published there is fed into this node's bus with [`ChangeBus::publish_local`], which tells
//! this node's sessions and is never published again. Each message names the node it came
//! from, so a node ignores its own.
//!
//! The bus calls its observer on the publishing thread, which must not wait: the observer
//! hands the change to a bounded channel (a full one drops it, counted), and a task sends it
//! to Redis. A second task holds the subscription; when its connection drops it resubscribes
//! by itself, and since changes may have been missed meanwhile, it then tells this node's
//! sessions that everything changed and asks the other nodes to do the same (a spurious
//! notification rather than a lost one, as the bus does locally).

use crate::cluster::Cluster;
use crate::mailbox::inbox::Changes;
use crate::mailbox::inbox::TaskNote;
use crate::registry::bus::{BusEvent, BusObserver, ChangeBus};
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Changes waiting to be sent to Redis.
const OUTGOING_CAPACITY: usize = 1024;

/// One change on the wire.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Message {
    /// The node that published it.
    node: u64,
    /// Lists that changed (`tools`, `resources`, `prompts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    lists: Vec<String>,
    /// A resource that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    updated: Option<String>,
    /// The sender may have missed changes: everything may have changed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    everything: bool,
    /// A task's stored status, for the listen streams that follow it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task: Option<TaskNote>,
    /// Answers or a cancel for a task, for the node that runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    steer: Option<Steer>,
    /// For the nodes that hold a copy of a session (`cluster.sessions = "redis"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    session: Option<SessionNote>,
}

/// What a node tells the others about a session it served.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct SessionNote {
    /// The session's id.
    pub id: String,
    /// What happened.
    pub kind: SessionNoteKind,
}

/// See [`SessionNote`].
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SessionNoteKind {
    /// A client message that needs no answer (responses, notifications such as a cancel),
    /// for the node running what it is about.
    Relay(String),
    /// The session's record changed (its JSON): copies take it up.
    Record(String),
    /// The client deleted the session: copies end.
    End,
    /// Another node was asked to resume this WebSocket session: the node that holds it hands
    /// it over (as when it stops), if no socket is attached to it there.
    HandOver,
}

/// Where the notes of sessions go on this node (set by the transport that hosts them).
pub(crate) type SessionSink = Box<dyn Fn(SessionNote) + Send + Sync>;

/// What `tasks/update` and `tasks/cancel` send the node that runs a task.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Steer {
    task: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cancel: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    responses: Option<serde_json::Map<String, serde_json::Value>>,
}

impl Message {
    /// "Every list changed": what a node says when changes may have been lost.
    fn everything(node: u64) -> Self {
        Self {
            node,
            lists: Vec::new(),
            updated: None,
            everything: true,
            task: None,
            steer: None,
            session: None,
        }
    }

    fn of(node: u64, event: &BusEvent) -> Self {
        let mut message = Self {
            node,
            lists: Vec::new(),
            updated: None,
            everything: false,
            task: None,
            steer: None,
            session: None,
        };
        match event {
            BusEvent::Lists(changes) => {
                message.lists = Changes::NAMED
                    .iter()
                    .filter(|(change, _)| changes.contains(*change))
                    .map(|(_, name)| (*name).to_owned())
                    .collect();
            }
            BusEvent::ResourceUpdated(uri) => message.updated = Some(uri.to_string()),
            BusEvent::Task(note) => message.task = Some(TaskNote::clone(note)),
            // Views are of this node's children: their changes are only published here.
            BusEvent::View(..) | BusEvent::ViewUpdated(..) | BusEvent::TasksMissed => {}
        }
        message
    }

    /// Feeds a remote change into this node's bus, and a steer to the task it names if it
    /// runs here.
    fn deliver(self, bus: &ChangeBus, cluster: &Cluster) {
        if let Some(note) = self.session {
            if let Some(sink) = cluster.session_sink.get() {
                sink(note);
            }
            return;
        }
        if let Some(steer) = self.steer {
            cluster
                .tasks
                .steer_from_remote(&steer.task, steer.cancel, steer.responses);
            return;
        }
        if let Some(note) = self.task {
            bus.publish_local(BusEvent::Task(Arc::new(note)));
            return;
        }
        if self.everything {
            mark_everything_changed(bus);
            return;
        }
        let changes = Changes::NAMED
            .iter()
            .filter(|(_, name)| self.lists.iter().any(|l| l == name))
            .fold(Changes::default(), |all, (change, _)| all.union(*change));
        if !changes.is_empty() {
            bus.publish_local(BusEvent::Lists(changes));
        }
        if let Some(uri) = self.updated {
            bus.publish_local(BusEvent::ResourceUpdated(uri.into()));
        }
    }
}

/// Every list changed; the bus cannot say "every resource updated", so subscribers hear of
/// the lists only.
fn mark_everything_changed(bus: &ChangeBus) {
    bus.publish_local(BusEvent::Lists(Changes::ALL));
}

/// The bus observer: hands local changes to the publishing task.
struct Outgoing {
    sender: mpsc::Sender<BusEvent>,
    cluster: std::sync::Weak<Cluster>,
}

impl BusObserver for Outgoing {
    fn published(&self, event: &BusEvent) {
        if self.sender.try_send(event.clone()).is_err() {
            if let Some(cluster) = self.cluster.upgrade() {
                cluster.metrics.bridge_dropped.inc();
                cluster.owes_everything.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// Starts the bridge when Redis is configured. Called once, inside the server's runtime.
pub(crate) fn start(cluster: &Arc<Cluster>) {
    if cluster.store.redis().is_none() {
        return;
    }
    let (sender, receiver) = mpsc::channel(OUTGOING_CAPACITY);
    cluster.bus.set_observer(Box::new(Outgoing {
        sender,
        cluster: Arc::downgrade(cluster),
    }));
    actix_rt::spawn(publish(cluster.clone(), receiver));
    actix_rt::spawn(subscribe(cluster.clone()));
    // Beats whatever the sessions: a keyed call's retry also asks whether the node running
    // it lives.
    actix_rt::spawn(beat(cluster.clone()));
    actix_rt::spawn(crate::cluster::rewrite::keep_saying(Arc::downgrade(
        cluster,
    )));
}

/// How often the bus subscription's connection is asked whether it still answers.
const SUBSCRIPTION_PING: std::time::Duration = std::time::Duration::from_secs(5);

/// How often a node says it is alive; it counts as dead three beats after its last.
pub(crate) const BEAT: std::time::Duration = std::time::Duration::from_secs(1);

/// Says this node is alive, every [`BEAT`]: a stream of a request it runs is resumed on
/// another node by waiting for its events, and a retry of a keyed call it runs waits for
/// its answer, until the node is found dead. A beat Redis takes after an outage also
/// writes back what this node kept meanwhile (results, releases; task records are the
/// tasks module's, `tasks::keep_tidy`) and tells the others every list changed if a change
/// of its own did not reach them.
async fn beat(cluster: Arc<Cluster>) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    let node = cluster.node_number();
    let mut every = tokio::time::interval(BEAT);
    // Beats Redis answers before the eviction policy is no longer asked: a slow first
    // answer is not the last word, a refused CONFIG is.
    let mut policy_asks_left = 3u8;
    // The outage whose claims were taken for lost (once an outage: a claim Redis did not
    // answer since stays due).
    let mut claims_marked_for = 0;
    loop {
        every.tick().await;
        // A fresh candidate for Redis's epoch each time: one this node wrote before would
        // not tell an epoch it writes again after Redis lost it from the one it had.
        let candidate = crate::random_id().to_string();
        // Whether this beat began the keep pass (not a second below).
        let mut kept_early = false;
        if redis.failed_since_last_answer() {
            // Back from an outage, Redis may have come back empty: the node says it may be
            // writing its records again before it knows (see `Cluster::may_rewrite`).
            cluster.may_rewrite(true);
            // And writes the claims of the calls running here again with this beat, not
            // after its answer: over a slow link that answer comes a round trip later,
            // and the claims landed past the other nodes' wait after Redis came back
            // empty, a retry elsewhere finding the key free and running the call a second
            // time (stop 56's note, window 2). A keep extends a claim Redis holds and
            // writes one it lost.
            // Counted where Redis's failures are (an answer may come between two beats,
            // so a failure alone does not tell one outage from the next).
            let outage = cluster.metrics.redis_outages.get();
            if outage != claims_marked_for {
                claims_marked_for = outage;
                cluster.store.claims_may_be_lost();
            }
            if cluster.store.has_claims_due() {
                keep_claims(&cluster);
                kept_early = true;
            }
        }
        let Some(still_held) = redis
            .beat(&cluster.metrics, node, crate::cluster::ALIVE_FOR)
            .await
        else {
            // The claims due are kept, and the results and releases owed are sent, anyway:
            // over a slow link (commands reach Redis, its replies come late) the beats land
            // and the node lives to the others, and a lease let lapse would let a retry
            // elsewhere run a call still running here, or run again one that ended (review
            // 55 #1). Redis away, the attempts fail (each within `redis.timeout_ms`, off the
            // beat's task).
            if cluster.store.has_claims_due() || cluster.store.has_stranded() {
                cluster.store.push_wanted.store(true, Ordering::Release);
                if !kept_early {
                    keep_claims(&cluster);
                }
            }
            // So are the task records Redis did not take (attack run 52b, F1: over a slow
            // link they were never written, and the other nodes showed the node's tasks
            // working after they ended, or unknown).
            if cluster.tasks.has_unsaved() {
                one_pass_at_a_time(
                    &cluster,
                    |c| &c.tasks.pushing,
                    |cluster| async move {
                        cluster.tasks.push_unsaved(&cluster).await;
                    },
                );
            }
            continue;
        };
        // Answered: what is owed is written back in order (`write_back`, below), not
        // pushed by a keep pass.
        cluster.store.push_wanted.store(false, Ordering::Release);
        // Noted whatever becomes of the epoch's question (review 52 #4).
        cluster.note_beat(still_held);
        // The event loops' connections asked too, off the beat's task.
        one_pass_at_a_time(
            &cluster,
            |c| &c.store.keeping_connections,
            |cluster| async move {
                if let Some(redis) = cluster.store.redis() {
                    redis.keep_connections().await;
                }
            },
        );
        let epoch = redis.epoch_or(&cluster.metrics, &candidate).await;
        let epoch_read = epoch.is_some();
        let lost = epoch.is_some_and(|now| cluster.note_epoch(now));
        if !still_held || lost {
            // The first beat, after an outage past the node's alive time, or Redis lost
            // what it held: the claims of the calls running here are written again where
            // they are gone, each until Redis answers for it, by the next pass (this
            // beat's, or the next one's if a pass is under way).
            cluster.store.claims_may_be_lost();
        }
        if cluster.store.has_claims_due() {
            // Those, leases near their end, and claims of calls that began in memory while
            // Redis could not be asked.
            keep_claims(&cluster);
        }
        if lost {
            // Every other record this node keeps is written again too: until then, the other
            // nodes took its sessions for ended (404) and its tasks for unknown (attack run
            // 50c, F2).
            tracing::warn!("Redis lost what it held (restarted empty?): writing again what this node keeps there");
            // Said at once, off the beat's task, and renewed until the records are all
            // written: the other nodes' wait covers a rewrite longer than theirs (attack
            // run 52b, F2).
            cluster.records_lost();
            if let Some(secret) = cluster.shared_secret.get() {
                redis.put_back_secret(&cluster.metrics, secret).await;
            }
            // The nonces of the signed requests this node ran: a replay on another node
            // would run again (attack run 51, N1). Written with the stranded ones below.
            if let Some(nonces) = cluster.nonces.get() {
                for (nonce, expires) in nonces.live() {
                    cluster.store.strand_nonce(nonce, expires);
                }
            }
        }
        if epoch_read {
            // Known now: a loss is being written back (said while `rewriting` is), or was
            // none.
            cluster.may_rewrite(false);
        }
        if policy_asks_left > 0 {
            policy_asks_left -= 1;
            if warn_if_evicting(redis).await {
                policy_asks_left = 0;
            }
        }
        if !crate::lock(&cluster.owed_ends).is_empty() {
            // Off the beat's task: up to a thousand publishes could hold the next beats
            // past the node's alive time (review 52 #10).
            one_pass_at_a_time(
                &cluster,
                |c| &c.telling_owed_ends,
                |cluster| async move {
                    tell_owed_ends(&cluster).await;
                },
            );
        }
        if cluster.store.has_stranded() {
            cluster.store.write_back(&cluster.metrics).await;
        }
        if cluster.store.has_stranded_nonces() {
            // Off the beat's task (review 55 #6: up to sixteen round trips after the
            // results' could hold the next beat past the node's alive time), and not behind
            // a result Redis refused.
            one_pass_at_a_time(
                &cluster,
                |c| &c.store.writing_nonces,
                |cluster| async move {
                    cluster.store.write_back_nonces(&cluster.metrics).await;
                },
            );
        }
        if cluster.owes_everything.swap(false, Ordering::Relaxed) {
            tracing::info!("telling the other nodes every list changed: a change of this node's did not reach them");
            send_or_owe(&cluster, &Message::everything(cluster.store.node())).await;
        }
    }
}

/// At a graceful shutdown, once the sessions and tasks are done: one last attempt at what
/// this node owes Redis and would otherwise take with it. The results of keyed calls that
/// ended while Redis was away or skipped (lost, their claims lapse and a retry elsewhere
/// runs the call again) and the releases of runs that ended without one (their claims hold
/// the keys until their leases lapse) are written back in order, results first, as a beat
/// Redis answers writes them; what that leaves (Redis skipped after a failure) is sent
/// once, all together, as the keep pass sends it over a slow link. Then the task records
/// Redis did not take (a task's end at the grace's end among them), and, if Redis is not
/// skipped, the signature nonces taken while it was away and the ends of sessions the other
/// nodes were not told. The caller bounds the time; what Redis does not take goes with the
/// node, as it did before.
pub(crate) async fn settle_owed(cluster: &Arc<Cluster>) {
    if cluster.store.redis().is_none() {
        return;
    }
    for _ in 0..cluster.store.stranded_passes() {
        cluster.store.write_back(&cluster.metrics).await;
    }
    for _ in 0..cluster.store.stranded_passes() {
        cluster.store.push_stranded(&cluster.metrics).await;
    }
    if cluster.tasks.has_unsaved() {
        cluster.tasks.push_unsaved(cluster).await;
    }
    cluster.store.write_back_nonces(&cluster.metrics).await;
    tell_owed_ends(cluster).await;
}

/// Tells the other nodes the session ends they could not be told (`Cluster::owed_ends`),
/// oldest first, until Redis refuses one.
async fn tell_owed_ends(cluster: &Cluster) {
    loop {
        let Some(id) = crate::lock(&cluster.owed_ends).pop_front() else {
            return;
        };
        let note = SessionNote {
            id,
            kind: SessionNoteKind::End,
        };
        if !send_session_note(cluster, note.clone()).await {
            crate::lock(&cluster.owed_ends).push_front(note.id);
            return;
        }
    }
}

/// Owes the other nodes the end of session `id` (see `Cluster::owed_ends`).
pub(crate) fn owe_end(cluster: &Cluster, id: &str) {
    let mut owed = crate::lock(&cluster.owed_ends);
    if owed.len() >= crate::cluster::MAX_OWED_ENDS {
        owed.pop_front();
    }
    owed.push_back(id.to_owned());
}

/// Warns, once Redis first answers, when its `maxmemory-policy` evicts keys: at its memory
/// limit it would drop session records (a session then found on one node and not on
/// another) and running calls' claims (a retry elsewhere runs the call again). The store
/// needs `noeviction`, under which a full Redis refuses writes and is treated as away. (The
/// `volatile-*` policies evict too: every key of the store has a time to live.) With a Redis
/// Cluster, the one node `CONFIG GET` reaches is asked. Says whether Redis answered.
async fn warn_if_evicting(redis: &super::redis::RedisStore) -> bool {
    match redis.eviction_policy().await {
        Some(policy) => {
            if policy != "noeviction" {
                tracing::warn!(
                    %policy,
                    "Redis evicts keys at its memory limit (maxmemory-policy): session records and claims of running calls may vanish; set maxmemory-policy noeviction"
                );
            }
            true
        }
        None => {
            tracing::debug!("Redis did not say its maxmemory-policy (CONFIG refused or slow)");
            false
        }
    }
}

/// Sends this node's changes to Redis, in order. One that cannot be sent is dropped, and
/// the other nodes hear "everything changed" once Redis answers again (the next beat it
/// takes).
async fn publish(cluster: Arc<Cluster>, mut receiver: mpsc::Receiver<BusEvent>) {
    let node = cluster.store.node();
    while let Some(event) = receiver.recv().await {
        send_or_owe(&cluster, &Message::of(node, &event)).await;
    }
}

/// [`send`], and if it did not go, the other nodes are owed "every list changed" (told at
/// the next beat Redis takes).
async fn send_or_owe(cluster: &Cluster, message: &Message) {
    if !send(cluster, message).await {
        cluster.owes_everything.store(true, Ordering::Relaxed);
    }
}

/// Publishes `message`; whether Redis took it (dropped and counted otherwise).
async fn send(cluster: &Cluster, message: &Message) -> bool {
    let Some(redis) = cluster.store.redis() else {
        return true;
    };
    let Ok(text) = serde_json::to_string(message) else {
        return false;
    };
    if redis.publish(&cluster.metrics, text).await {
        cluster.metrics.bridge_published.inc();
        true
    } else {
        cluster.metrics.bridge_dropped.inc();
        false
    }
}

/// Keeps the claims due of the calls running here ([`Store::keep_running`](super::Store::keep_running)),
/// off the beat's task (a round trip could hold the next beat past the node's alive time,
/// review 51 #10), one pass at a time (review 55 #5: over a slow Redis, passes spawned at
/// each beat piled up).
/// After the claims, the results and releases owed are sent too
/// ([`Store::push_stranded`](super::Store::push_stranded)) when a beat Redis did not answer
/// asked for it since the last pass did (`Store::push_wanted`): a beat asks the pass under
/// way, or the next one, rather than start a second (skipped while one runs, or doubling
/// the attempts while Redis fails fast).
fn keep_claims(cluster: &Arc<Cluster>) {
    one_pass_at_a_time(
        cluster,
        |c| &c.store.keeping,
        move |cluster| async move {
            cluster.store.keep_running(&cluster.metrics).await;
            if cluster.store.push_wanted.swap(false, Ordering::AcqRel) {
                cluster.store.push_stranded(&cluster.metrics).await;
            }
        },
    );
}

/// Runs `pass` on a task of its own, off the beat's, unless a pass of its kind is under way
/// (`busy`, a flag of the cluster's): one at a time. The flag is cleared however the pass
/// ends (done, dropped with its arbiter, or a panic): left set, no later beat would run
/// one again (review 54 #10).
fn one_pass_at_a_time<F>(
    cluster: &Arc<Cluster>,
    busy: fn(&Cluster) -> &AtomicBool,
    pass: impl FnOnce(Arc<Cluster>) -> F + 'static,
) where
    F: std::future::Future<Output = ()> + 'static,
{
    if busy(cluster).swap(true, Ordering::AcqRel) {
        return;
    }
    struct Clears(Arc<Cluster>, fn(&Cluster) -> &AtomicBool);
    impl Drop for Clears {
        fn drop(&mut self) {
            (self.1)(&self.0).store(false, Ordering::Release);
        }
    }
    let clears = Clears(cluster.clone(), busy);
    actix_rt::spawn(async move {
        pass(clears.0.clone()).await;
        drop(clears);
    });
}

/// Holds the subscription and feeds what other nodes publish into this node's bus;
/// resubscribes whenever the connection drops.
async fn subscribe(cluster: Arc<Cluster>) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    let node = cluster.store.node();
    let bus = cluster.bus.clone();
    let channel = redis.bus_channel();
    let mut missed = false;
    // The subscription's loss is logged once until it is made again.
    let mut loss_logged = false;
    loop {
        let subscribed =
            tokio::time::timeout(redis.subscribe_timeout(), redis.subscribed(&channel)).await;
        match subscribed {
            Ok(Ok(pubsub)) => {
                cluster.metrics.bridge_subscribed.inc();
                tracing::info!("change bus bridged to the other nodes through Redis");
                loss_logged = false;
                if missed {
                    // Changes may have come and gone while the bridge was down, both ways.
                    mark_everything_changed(&bus);
                    send_or_owe(&cluster, &Message::everything(node)).await;
                    // And notes about sessions: this node's copies read their records
                    // again (a session deleted on another node meanwhile was served here
                    // until its copy was let go, idle).
                    if let Some(notes_missed) = cluster.notes_missed.get() {
                        notes_missed();
                    }
                    // And steers for the tasks running here.
                    let replaying = cluster.clone();
                    actix_rt::spawn(async move { replay_task_steers(&replaying).await });
                    // And task statuses: the listen streams here read the records of the
                    // tasks they follow again (attack run 52b, F5: one whose task ended
                    // meanwhile was never told, and stayed open for good).
                    bus.publish_local(BusEvent::TasksMissed);
                }
                // The connection is asked a PING now and then: one dropped without a word
                // (a NAT or a balancer forgetting an idle connection) would otherwise look
                // subscribed and hear nothing, for good.
                let (mut sink, mut messages) = pubsub.split();
                let mut ping = tokio::time::interval(SUBSCRIPTION_PING);
                ping.tick().await;
                loop {
                    let message = tokio::select! {
                        message = messages.next() => message,
                        _ = ping.tick() => {
                            let answered = tokio::time::timeout(
                                redis.timeout(),
                                sink.ping::<::redis::Value>(),
                            )
                            .await;
                            if matches!(answered, Ok(Ok(_))) {
                                continue;
                            }
                            None
                        }
                    };
                    let Some(message) = message else { break };
                    let Ok(payload) = message.get_payload::<String>() else {
                        continue;
                    };
                    match serde_json::from_str::<Message>(&payload) {
                        Ok(message) if message.node == node => {}
                        Ok(message) => {
                            cluster.metrics.bridge_received.inc();
                            message.deliver(&bus, &cluster);
                        }
                        Err(error) => {
                            tracing::debug!(%error, "unreadable message on the bus channel; ignored")
                        }
                    }
                }
                cluster.metrics.bridge_subscribed.dec();
                bus_down(&cluster, &"the connection dropped", &mut loss_logged);
            }
            Ok(Err(error)) => bus_down(&cluster, &error, &mut loss_logged),
            Err(_elapsed) => bus_down(&cluster, &"timed out", &mut loss_logged),
        }
        missed = true;
        tokio::time::sleep(redis.retry_after()).await;
    }
}

/// The bus subscription dropped, or could not be made: counted (`mcp_redis_errors_total`)
/// and logged once a stretch (`logged`, until it is made again). The node does not skip
/// Redis for it: the subscription's connection is its own,
/// and says nothing of the data's (a first seed of a cluster that stalled made every
/// node refuse keyed calls every other second, attack run 52a, C2); an outage is found by
/// the operations and beats that meet it.
fn bus_down(cluster: &Cluster, error: &dyn std::fmt::Display, logged: &mut bool) {
    cluster.metrics.redis_errors.inc();
    if !std::mem::replace(logged, true) {
        tracing::warn!(%error, "change bus lost its Redis subscription; subscribing again");
    }
}

/// Sends a client's answers (`responses`) or its cancel for a task to the other nodes (the
/// one that runs it acts on it), kept in Redis for the task's time left (`ttl`); whether
/// Redis took it. Without Redis there are no other nodes: nothing to do.
pub(crate) async fn send_task_steer(
    cluster: &Cluster,
    id: &str,
    ttl: std::time::Duration,
    cancel: bool,
    responses: Option<serde_json::Map<String, serde_json::Value>>,
) -> bool {
    let Some(redis) = cluster.store.redis() else {
        return true;
    };
    let steer = Steer {
        task: id.to_owned(),
        cancel,
        responses,
    };
    // Kept in Redis too, for as long as the task runs: the runner's node reads it there
    // if its subscription was down when the message went out (attack run 52b, F4: the
    // message reached the other nodes, the steer was acknowledged, and it was lost). One
    // longer than a task's room for them is sent only (attack run 58, F2): if that message
    // is missed, the task still asks its question, and the client answers it again.
    let Ok(kept) = serde_json::to_string(&steer) else {
        return false;
    };
    let keep = kept.len() <= super::redis::TASK_STEERS_KEPT_BYTES;
    if keep
        && !redis
            .keep_task_steer(&cluster.metrics, id, kept.clone(), ttl)
            .await
    {
        return false;
    }
    let message = Message {
        node: cluster.store.node(),
        lists: Vec::new(),
        updated: None,
        everything: false,
        task: None,
        steer: Some(steer),
        session: None,
    };
    if send(cluster, &message).await {
        return true;
    }
    // The client is told it was not taken: not to apply later either.
    if keep {
        redis.forget_task_steer(&cluster.metrics, id, kept).await;
    }
    false
}

/// Delivers again to the tasks running here the steers kept for them in Redis
/// ([`send_task_steer`]): this node's bus subscription was down, and their messages may
/// have come meanwhile. A steer delivered twice does nothing more: a cancel cancels once,
/// answers to questions already answered are ignored. One at a time, each waiting for room
/// in its runner's queue (`Tasks::replay_steer`): the steers of every running task at once
/// took the room of the other nodes' new ones (review 58 #4).
async fn replay_task_steers(cluster: &Cluster) {
    let Some(redis) = cluster.store.redis() else {
        return;
    };
    for id in cluster.tasks.running_ids() {
        let Some(steers) = redis.task_steers(&cluster.metrics, &id).await else {
            // Redis out of reach: the rest wait for the next time the bus comes back.
            return;
        };
        for steer in steers {
            if let Ok(steer) = serde_json::from_str::<Steer>(&steer) {
                if steer.task == id {
                    cluster
                        .tasks
                        .replay_steer(&id, steer.cancel, steer.responses)
                        .await;
                }
            }
        }
    }
}

/// Tells the other nodes about a session (`cluster.sessions = "redis"`).
pub(crate) async fn send_session_note(cluster: &Cluster, note: SessionNote) -> bool {
    let message = Message {
        node: cluster.store.node(),
        lists: Vec::new(),
        updated: None,
        everything: false,
        task: None,
        steer: None,
        session: Some(note),
    };
    send(cluster, &message).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_carry_lists_and_updates() {
        let lists = Message::of(7, &BusEvent::Lists(Changes::TOOLS.union(Changes::PROMPTS)));
        let text = serde_json::to_string(&lists).expect("encodes");
        assert_eq!(text, r#"{"node":7,"lists":["tools","prompts"]}"#);
        assert_eq!(
            serde_json::from_str::<Message>(&text).expect("decodes"),
            lists
        );
        let updated = Message::of(7, &BusEvent::ResourceUpdated(Arc::from("file:///a")));
        assert_eq!(
            serde_json::to_string(&updated).expect("encodes"),
            r#"{"node":7,"updated":"file:///a"}"#
        );
    }
}
