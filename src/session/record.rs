//! A session-era session as other nodes see it ([`SessionRecord`]): what `initialize`
//! settled and what the client changed since (log level, subscriptions), so that any node
//! can serve the session's next request (`cluster.sessions = "redis"`). Requests in flight,
//! requests to the client and event logs are not in it: they stay on the node that holds
//! them, and messages for them travel between nodes (see `transport::http`). A WebSocket
//! session's record also lists the ids of its requests in flight, so that the node that takes
//! it up after its node died answers them (see `transport::socket_record`).

use super::{Negotiated, Phase, Session};
use crate::context::SessionInfo;
use crate::model::{ForVersion, Implementation};
use crate::protocol::jsonrpc::RequestId;
use crate::protocol::mcp::{LogLevel, Offers, ProtocolVersion};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What another node needs to serve a session; see the module docs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionRecord {
    /// WebSocket sessions: the node that holds the session (its socket, or its copy parked
    /// for a reconnect), by its number (`Cluster::node_number`); none once that node handed
    /// it over as it stopped. Another node takes the session up only when none holds it,
    /// or the one that does is dead. The first member of the JSON, so that Redis reads it
    /// with an anchored pattern, before anything a client chose, rather than parse the
    /// whole record at each write (`store::redis`, `HELD_BY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<u64>,
    /// The negotiated protocol version.
    pub version: String,
    /// The capability kinds declared in `initialize`: tools, resources, prompts,
    /// completions, tasks.
    pub offers: [bool; 5],
    /// The client's capabilities.
    pub capabilities: Value,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// Who the session belongs to (`Identity::principal`).
    pub principal: String,
    /// What the credential that opened it grants: another node serves the session with
    /// that, and only to a credential of the principal that grants at least as much. A
    /// record written before the field had none: it is taken as unrestricted (only a
    /// credential that may use everything takes it up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grant: Option<crate::perimeter::Grant>,
    /// The client's `logging/setLevel`.
    pub log_level: LogLevel,
    /// The resource URIs the client subscribed to.
    pub subscriptions: Vec<String>,
    /// The session's trace id.
    pub trace_id: String,
    /// Bumped by each change; a node keeps the highest it saw.
    pub revision: u64,
    /// A WebSocket session (resumed with its id over a new socket), not an HTTP one.
    #[serde(default)]
    pub websocket: bool,
    /// WebSocket sessions: the ids of its requests in flight, as of the last write: a node
    /// that takes the session up after its node died answers them (the node was lost).
    /// Each is the id's JSON text as its client wrote it ([`RequestId::as_json`]), not a
    /// value: two integers beyond 64 bits would read as one float, and `1e400` as none.
    #[serde(default)]
    pub in_flight: Vec<Box<RawValue>>,
}

impl Session {
    /// The session as a record, once initialized.
    pub fn record(&self) -> Option<SessionRecord> {
        let Phase::Ready(negotiated) = &self.phase else {
            return None;
        };
        let offers = negotiated.offers;
        let info = &negotiated.info;
        let mut subscriptions: Vec<String> = self.subscriptions().cloned().collect();
        subscriptions.sort_unstable();
        Some(SessionRecord {
            version: negotiated.version.as_str().to_owned(),
            offers: [
                offers.tools,
                offers.resources,
                offers.prompts,
                offers.completions,
                offers.tasks,
            ],
            capabilities: (*info.client_capabilities).clone(),
            client_info: serde_json::to_value(ForVersion(&*info.client_info, negotiated.version))
                .unwrap_or_default(),
            principal: self.admission.identity.principal().to_owned(),
            grant: Some(self.admission.access.grant()),
            log_level: self.inbox.log_level(),
            subscriptions,
            trace_id: self.admission.trace_id.to_string(),
            revision: self.revision,
            websocket: false,
            in_flight: Vec::new(),
            node: None,
        })
    }

    /// The session-era requests in flight that began at least `age` before `now` (and
    /// those answered in a batch still waiting for its other entries), for
    /// [`SessionRecord::in_flight`], and when the first of the others will have (`None`:
    /// there are no others). 2026-07-28 requests are left out: that revision has no
    /// resumption.
    pub fn in_flight_settled(
        &self,
        now: Instant,
        age: Duration,
    ) -> (Vec<RequestId>, Option<Instant>) {
        let mut settled = Vec::new();
        let mut next: Option<Instant> = None;
        // Batches with an entry listed: their entries answered meanwhile are listed too.
        let mut listed_batches = Vec::new();
        for (id, entry) in &self.in_flight {
            if entry.stateless {
                continue;
            }
            let settles = entry.record.started() + age;
            if settles <= now {
                settled.push(id.clone());
                listed_batches.extend(entry.batch);
            } else {
                next = Some(next.map_or(settles, |next| next.min(settles)));
            }
        }
        // Answered in a batch whose answer waits for an entry still running: lost with this
        // node as that entry would be, for as long as it runs. Listed with it, so that a
        // batch answered within `age` costs no write, as a request does. (Batches are of
        // 2025-03-26 sessions only.)
        if !listed_batches.is_empty() {
            listed_batches.sort_unstable();
            listed_batches.dedup();
            if let Some(occasional) = &self.occasional {
                for batch in listed_batches {
                    if let Some(pending) = occasional.batches.get(&batch) {
                        settled.extend(pending.answered.iter().cloned());
                    }
                }
            }
        }
        (settled, next)
    }

    /// How many times what a [`SessionRecord`] holds changed (setLevel, subscriptions).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Takes up a session another node began: ready with what `initialize` settled there,
    /// the client's log level and subscriptions. A record of an older revision than what
    /// this node holds is ignored. Says whether the record was usable.
    pub fn restore(&mut self, record: &SessionRecord) -> bool {
        if matches!(self.phase, Phase::Ready(_)) && record.revision <= self.revision {
            return true;
        }
        let Some(version) = ProtocolVersion::parse(&record.version) else {
            return false;
        };
        let Ok(client_info) = serde_json::from_value::<Implementation>(record.client_info.clone())
        else {
            return false;
        };
        let [tools, resources, prompts, completions, tasks] = record.offers;
        let offers = Offers {
            tools,
            resources,
            prompts,
            completions,
            tasks,
        };
        let scope = match &self.phase {
            Phase::Ready(negotiated) => negotiated.info.scope.clone(),
            Phase::AwaitingInit => Some(crate::context::SessionScope::new(self.id)),
        };
        self.phase = Phase::Ready(Negotiated {
            version,
            offers,
            info: Rc::new(SessionInfo {
                protocol_version: version,
                client_capabilities: Arc::new(record.capabilities.clone()),
                client_info: Arc::new(client_info),
                identity: self.admission.identity.clone(),
                trace_id: self.admission.trace_id.clone(),
                scope,
            }),
        });
        self.inbox.set_log_level(record.log_level);
        let wanted: std::collections::HashSet<String> =
            record.subscriptions.iter().cloned().collect();
        // A session with no subscriptions, had or wanted, is left without the allocation.
        if !wanted.is_empty() || self.occasional.is_some() {
            let subscriptions = &mut self
                .occasional
                .get_or_insert_with(Box::default)
                .subscriptions;
            for gone in subscriptions
                .difference(&wanted)
                .cloned()
                .collect::<Vec<_>>()
            {
                subscriptions.remove(&gone);
                self.inbox.drop_interest(&gone);
                self.shared.metrics.subscriptions.dec();
            }
            for new in wanted {
                if subscriptions.insert(new.clone()) {
                    self.inbox.add_interest(&new);
                    self.shared.metrics.subscriptions.inc();
                }
            }
        }
        if self.bus.is_none() {
            self.bus = Some(
                self.shared
                    .registry
                    .bus()
                    .attach(&self.inbox, crate::registry::Viewer::Session(self.id)),
            );
        }
        self.revision = record.revision;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis reads a WebSocket record's holder by an anchored pattern (`store::redis`,
    /// `HELD_BY`): `node` must be the JSON's first member, before anything a client chose.
    #[test]
    fn the_holder_is_the_records_first_member() {
        let record = SessionRecord {
            node: Some(685_433),
            version: "2025-11-25".into(),
            offers: [true; 5],
            capabilities: serde_json::json!({"node": 1}),
            client_info: serde_json::json!({}),
            principal: "anonymous".into(),
            grant: None,
            log_level: LogLevel::Info,
            subscriptions: Vec::new(),
            trace_id: String::new(),
            revision: 1,
            websocket: true,
            in_flight: Vec::new(),
        };
        let json = serde_json::to_string(&record).expect("encodes");
        assert!(json.starts_with(r#"{"node":685433,"#), "{json}");
        let handed_over = SessionRecord {
            node: None,
            ..record
        };
        let json = serde_json::to_string(&handed_over).expect("encodes");
        assert!(json.starts_with(r#"{"version":"#), "{json}");
    }
}
