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

use crate::mailbox::inbox::Changes;
use crate::mailbox::inbox::TaskNote;
use crate::registry::bus::{BusEvent, BusObserver, ChangeBus};
use crate::session::shared::Shared;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
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
}

/// What `tasks/update` and `tasks/cancel` send the node that runs a task.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Steer {
    task: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    cancel: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    responses: Option<serde_json::Map<String, serde_json::Value>>,
}

const LISTS: [(Changes, &str); 3] = [
    (Changes::TOOLS, "tools"),
    (Changes::RESOURCES, "resources"),
    (Changes::PROMPTS, "prompts"),
];

fn all_lists() -> Changes {
    Changes::TOOLS
        .union(Changes::RESOURCES)
        .union(Changes::PROMPTS)
}

impl Message {
    fn of(node: u64, event: &BusEvent) -> Self {
        let mut message = Self {
            node,
            lists: Vec::new(),
            updated: None,
            everything: false,
            task: None,
            steer: None,
        };
        match event {
            BusEvent::Lists(changes) => {
                message.lists = LISTS
                    .iter()
                    .filter(|(change, _)| changes.contains(*change))
                    .map(|(_, name)| (*name).to_owned())
                    .collect();
            }
            BusEvent::ResourceUpdated(uri) => message.updated = Some(uri.to_string()),
            BusEvent::Task(note) => message.task = Some(TaskNote::clone(note)),
        }
        message
    }

    /// Feeds a remote change into this node's bus, and a steer to the task it names if it
    /// runs here.
    fn deliver(self, bus: &ChangeBus, tasks: &crate::cluster::tasks::Tasks) {
        if let Some(steer) = self.steer {
            let signal = match steer.responses {
                Some(responses) if !steer.cancel => crate::cluster::tasks::Signal::Answer {
                    responses,
                    applied: None,
                },
                _ => crate::cluster::tasks::Signal::Cancel { applied: None },
            };
            tasks.signal_local(&steer.task, signal);
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
        let changes = LISTS
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
    bus.publish_local(BusEvent::Lists(all_lists()));
}

/// The bus observer: hands local changes to the publishing task.
struct Outgoing {
    sender: mpsc::Sender<BusEvent>,
    shared: std::sync::Weak<Shared>,
}

impl BusObserver for Outgoing {
    fn published(&self, event: &BusEvent) {
        if self.sender.try_send(event.clone()).is_err() {
            if let Some(shared) = self.shared.upgrade() {
                shared.metrics.bridge_dropped.inc();
            }
        }
    }
}

/// Starts the bridge when Redis is configured. Called once, inside the server's runtime.
pub(crate) fn start(shared: &Arc<Shared>) {
    if shared.store.redis().is_none() {
        return;
    }
    let (sender, receiver) = mpsc::channel(OUTGOING_CAPACITY);
    shared.registry.bus().set_observer(Box::new(Outgoing {
        sender,
        shared: Arc::downgrade(shared),
    }));
    actix_rt::spawn(publish(shared.clone(), receiver));
    actix_rt::spawn(subscribe(shared.clone()));
}

/// Sends this node's changes to Redis, in order. One that cannot be sent is dropped (the
/// other nodes hear "everything changed" once this node's subscription comes back).
async fn publish(shared: Arc<Shared>, mut receiver: mpsc::Receiver<BusEvent>) {
    let node = shared.store.node();
    while let Some(event) = receiver.recv().await {
        send(&shared, &Message::of(node, &event)).await;
    }
}

async fn send(shared: &Shared, message: &Message) {
    let Some(redis) = shared.store.redis() else {
        return;
    };
    let Ok(text) = serde_json::to_string(message) else {
        return;
    };
    if redis.publish(&shared.metrics, text).await {
        shared.metrics.bridge_published.inc();
    } else {
        shared.metrics.bridge_dropped.inc();
    }
}

/// Holds the subscription and feeds what other nodes publish into this node's bus;
/// resubscribes whenever the connection drops.
async fn subscribe(shared: Arc<Shared>) {
    let Some(redis) = shared.store.redis() else {
        return;
    };
    let node = shared.store.node();
    let bus = shared.registry.bus().clone();
    let channel = redis.bus_channel();
    let mut missed = false;
    loop {
        let connect = async {
            let mut pubsub = redis.client().get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, ::redis::RedisError>(pubsub)
        };
        match tokio::time::timeout(redis.timeout(), connect).await {
            Ok(Ok(mut pubsub)) => {
                shared.metrics.bridge_subscribed.inc();
                tracing::info!("change bus bridged to the other nodes through Redis");
                if missed {
                    // Changes may have come and gone while the bridge was down, both ways.
                    mark_everything_changed(&bus);
                    send(
                        &shared,
                        &Message {
                            node,
                            lists: Vec::new(),
                            updated: None,
                            everything: true,
                            task: None,
                            steer: None,
                        },
                    )
                    .await;
                }
                let mut messages = pubsub.on_message();
                while let Some(message) = messages.next().await {
                    let Ok(payload) = message.get_payload::<String>() else {
                        continue;
                    };
                    match serde_json::from_str::<Message>(&payload) {
                        Ok(message) if message.node == node => {}
                        Ok(message) => {
                            shared.metrics.bridge_received.inc();
                            message.deliver(&bus, &shared.tasks);
                        }
                        Err(error) => {
                            tracing::debug!(%error, "unreadable message on the bus channel; ignored")
                        }
                    }
                }
                shared.metrics.bridge_subscribed.dec();
                redis.failed(&shared.metrics, "subscribe", &"the connection dropped");
            }
            Ok(Err(error)) => redis.failed(&shared.metrics, "subscribe", &error),
            Err(_elapsed) => redis.failed(&shared.metrics, "subscribe", &"timed out"),
        }
        missed = true;
        tokio::time::sleep(redis.retry_after()).await;
    }
}

/// Sends answers or a cancel for a task to the other nodes (the one that runs it acts on
/// it). Without Redis there are no other nodes: nothing to do.
pub(crate) async fn send_task_signal(
    shared: &Shared,
    id: &str,
    signal: crate::cluster::tasks::Signal,
) {
    let (cancel, responses) = match signal {
        crate::cluster::tasks::Signal::Answer { responses, .. } => (false, Some(responses)),
        crate::cluster::tasks::Signal::Cancel { .. } => (true, None),
        crate::cluster::tasks::Signal::Shutdown => return,
    };
    let message = Message {
        node: shared.store.node(),
        lists: Vec::new(),
        updated: None,
        everything: false,
        task: None,
        steer: Some(Steer {
            task: id.to_owned(),
            cancel,
            responses,
        }),
    };
    send(shared, &message).await;
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
