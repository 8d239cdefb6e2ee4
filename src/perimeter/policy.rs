//! Authorization: which tools, resources, prompts and methods each client may use, from the
//! allow-lists of `[[auth.policies]]`.
//!
//! The perimeter resolves a client's [`Access`] once, when it is admitted, from the policies
//! matching its identity or scopes. What a client may not use does not exist for it: a
//! forbidden method is answered like an unknown method (-32601), a forbidden tool like an
//! unknown tool, a forbidden prompt like an unknown prompt, a forbidden resource as not found,
//! and lists leave them out. With no policy configured every client has unrestricted access,
//! which costs a request one branch on `None`.
//!
//! A session is served with the access of the credential that opened it. Another credential
//! of the same identity may use the session only if it [`covers`](Access::covers) that
//! access: everything the session holds (remembered answers, streams, requests to the
//! client) was made under it, so a narrower one is told the session does not exist. The
//! access travels between nodes as a [`Grant`], the rules' fingerprints.

use crate::config::PolicySettings;
use crate::context::{Identity, Proof};
use crate::protocol::mcp::Error;
use crate::registry::ListKind;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// Methods every client may call, whatever its policies say: without them it could not even
/// start a session.
const ALWAYS_ALLOWED: [&str; 2] = ["initialize", "ping"];

/// The configured policies; see the module docs.
#[derive(Debug, Default)]
pub struct Policies {
    rules: Vec<Arc<Rule>>,
}

/// One policy: who it applies to, and what they may use.
#[derive(Debug)]
struct Rule {
    /// What names this rule to another node (a session's [`Grant`]): a digest of its
    /// settings, so that a node whose policies differ finds no rule by it.
    fingerprint: Box<str>,
    identities: Vec<String>,
    scopes: Vec<String>,
    tools: Patterns,
    resources: Patterns,
    prompts: Patterns,
    methods: Patterns,
}

/// What a client may use; cheap to clone. The default is unrestricted.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The rules of the policies that apply, any one of which allows; `None` when no policy
    /// is configured, or one that applies allows everything (unrestricted).
    rules: Option<Arc<[Arc<Rule>]>>,
}

/// An [`Access`] as a session's record in Redis carries it to other nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Grant {
    /// Unrestricted.
    Everything,
    /// The fingerprints of the rules that apply, in the order of `auth.policies`.
    Rules(Vec<String>),
}

impl Policies {
    /// The policies of `auth.policies`.
    pub fn new(settings: &[PolicySettings]) -> Self {
        let rules = settings
            .iter()
            .map(|p| {
                Arc::new(Rule {
                    fingerprint: fingerprint(p),
                    identities: p.identities.clone(),
                    scopes: p.scopes.clone(),
                    tools: Patterns::new(&p.tools),
                    resources: Patterns::new(&p.resources),
                    prompts: Patterns::new(&p.prompts),
                    methods: Patterns::new(&p.methods),
                })
            })
            .collect();
        Self { rules }
    }

    /// Whether any policy is configured.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// What `identity` may use: the union of the policies that apply to it; `None` when
    /// policies are configured and none applies (the client may use nothing).
    pub fn access_for(&self, identity: &Identity) -> Option<Access> {
        if self.rules.is_empty() {
            return Some(Access::default());
        }
        let matching: Vec<Arc<Rule>> = self
            .rules
            .iter()
            .filter(|rule| rule.applies_to(identity))
            .cloned()
            .collect();
        if matching.is_empty() {
            return None;
        }
        if matching.iter().any(|rule| rule.allows_everything()) {
            return Some(Access::default());
        }
        Some(Access {
            rules: Some(matching.into()),
        })
    }

    /// The access `grant` names on this node: `None` when a rule it names is not one of
    /// this node's (its policies differ), so that nothing is granted by guess.
    pub fn access_of(&self, grant: &Grant) -> Option<Access> {
        match grant {
            Grant::Everything => Some(Access::default()),
            Grant::Rules(fingerprints) => {
                let rules = fingerprints
                    .iter()
                    .map(|wanted| {
                        self.rules
                            .iter()
                            .find(|rule| *rule.fingerprint == **wanted)
                            .cloned()
                    })
                    .collect::<Option<Vec<_>>>()?;
                (!rules.is_empty()).then(|| Access {
                    rules: Some(rules.into()),
                })
            }
        }
    }

    /// Every scope some policy grants access for (for a 403's `scope`).
    pub fn scopes(&self) -> Vec<&str> {
        let mut scopes: Vec<&str> = self
            .rules
            .iter()
            .flat_map(|rule| rule.scopes.iter().map(String::as_str))
            .collect();
        scopes.sort_unstable();
        scopes.dedup();
        scopes
    }
}

impl Rule {
    fn applies_to(&self, identity: &Identity) -> bool {
        let by_identity = self.identities.iter().any(|entry| {
            if identity.is_authenticated() {
                // A bare name matches the subject however it was proven (as it always did);
                // `key:alice`, `jwt:alice`, `cert:…` only the identity of that proof, never a
                // subject that happens to be spelled so (a JWT whose `sub` is `key:alice`).
                entry == "*"
                    || (entry != "anonymous"
                        && if Proof::names(entry) {
                            entry == identity.principal()
                        } else {
                            entry == identity.subject()
                        })
            } else {
                entry == "anonymous"
            }
        });
        by_identity
            || (identity.is_authenticated()
                && identity
                    .scopes()
                    .iter()
                    .any(|scope| self.scopes.contains(scope)))
    }

    fn allows_everything(&self) -> bool {
        [&self.tools, &self.resources, &self.prompts, &self.methods]
            .iter()
            .all(|p| p.everything)
    }
}

impl Access {
    /// Whether the access is unrestricted (no policy limits it).
    pub fn is_unrestricted(&self) -> bool {
        self.rules.is_none()
    }

    /// Whether this access grants at least what `other` grants: it is unrestricted, or it
    /// is made of every rule `other` is made of (and perhaps more). A credential may use a
    /// session only if its access covers the session's.
    pub fn covers(&self, other: &Access) -> bool {
        match (&self.rules, &other.rules) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(mine), Some(theirs)) => theirs
                .iter()
                .all(|rule| mine.iter().any(|own| Arc::ptr_eq(own, rule))),
        }
    }

    /// This access as a session's record carries it to another node.
    pub fn grant(&self) -> Grant {
        match &self.rules {
            None => Grant::Everything,
            Some(rules) => Grant::Rules(
                rules
                    .iter()
                    .map(|rule| rule.fingerprint.to_string())
                    .collect(),
            ),
        }
    }

    fn allows(&self, pick: impl Fn(&Rule) -> &Patterns + Copy, name: &str) -> bool {
        match &self.rules {
            None => true,
            Some(rules) => rules.iter().any(|rule| pick(rule).matches(name)),
        }
    }

    /// Whether the client may call `method`.
    pub fn may_call(&self, method: &str) -> bool {
        self.rules.is_none()
            || ALWAYS_ALLOWED.contains(&method)
            || self
                .rules
                .as_ref()
                .is_some_and(|rules| rules.iter().any(|rule| rule.methods.matches(method)))
    }

    /// Whether the client may list and call the tool `name`.
    pub fn may_use_tool(&self, name: &str) -> bool {
        self.allows(|r| &r.tools, name)
    }

    /// Whether the client may list, read and subscribe to the resource `uri` (or see the
    /// resource template `uri`).
    pub fn may_use_resource(&self, uri: &str) -> bool {
        self.allows(|r| &r.resources, uri)
    }

    /// Whether the client may list, get and complete the prompt `name`.
    pub fn may_use_prompt(&self, name: &str) -> bool {
        self.allows(|r| &r.prompts, name)
    }

    /// -32601, as for an unknown method, unless the client may call `method`.
    pub fn check_method(&self, method: &str) -> Result<(), Error> {
        if self.may_call(method) {
            Ok(())
        } else {
            Err(Error::MethodNotFound {
                method: method.to_owned(),
            })
        }
    }

    /// Unknown tool, unless the client may use the tool `name`.
    pub fn check_tool(&self, name: &str) -> Result<(), Error> {
        if self.may_use_tool(name) {
            Ok(())
        } else {
            Err(Error::UnknownTool { name: name.into() })
        }
    }

    /// Unknown prompt, unless the client may use the prompt `name`.
    pub fn check_prompt(&self, name: &str) -> Result<(), Error> {
        if self.may_use_prompt(name) {
            Ok(())
        } else {
            Err(Error::UnknownPrompt { name: name.into() })
        }
    }

    /// Whether a list entry of `kind` with this key is shown to the client.
    pub fn shows(&self, kind: ListKind, key: &str) -> bool {
        match kind {
            ListKind::Tools => self.may_use_tool(key),
            ListKind::Resources | ListKind::ResourceTemplates => self.may_use_resource(key),
            ListKind::Prompts => self.may_use_prompt(key),
        }
    }
}

/// An allow-list: exact names, or patterns where `*` matches any run of characters.
#[derive(Debug)]
struct Patterns {
    /// One of the patterns is `*`.
    everything: bool,
    patterns: Vec<String>,
}

impl Patterns {
    fn new(patterns: &[String]) -> Self {
        Self {
            everything: patterns.iter().any(|p| p == "*"),
            patterns: patterns.to_vec(),
        }
    }

    fn matches(&self, name: &str) -> bool {
        self.everything || self.patterns.iter().any(|p| wildcard_match(p, name))
    }
}

/// A digest of a policy's settings, each list and entry length-prefixed so that no two
/// policies share one by how their entries split.
fn fingerprint(policy: &PolicySettings) -> Box<str> {
    let mut digest = Sha256::new();
    for list in [
        &policy.identities,
        &policy.scopes,
        &policy.tools,
        &policy.resources,
        &policy.prompts,
        &policy.methods,
    ] {
        digest.update((list.len() as u64).to_le_bytes());
        for entry in list {
            digest.update((entry.len() as u64).to_le_bytes());
            digest.update(entry.as_bytes());
        }
    }
    data_encoding::HEXLOWER
        .encode(&digest.finalize()[..8])
        .into()
}

/// Whether `text` matches `pattern`, in which `*` stands for any run of characters (possibly
/// empty) and everything else for itself.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let mut parts: Vec<&str> = rest.split('*').collect();
    let last = parts.pop().unwrap_or("");
    for part in parts {
        match remaining.find(part) {
            Some(at) => remaining = &remaining[at + part.len()..],
            None => return false,
        }
    }
    remaining.len() >= last.len() && remaining.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(identities: &[&str], scopes: &[&str], tools: &[&str]) -> PolicySettings {
        let strings = |list: &[&str]| list.iter().map(|s| s.to_string()).collect();
        PolicySettings {
            identities: strings(identities),
            scopes: strings(scopes),
            tools: strings(tools),
            resources: vec!["*".into()],
            prompts: vec!["*".into()],
            methods: vec!["*".into()],
        }
    }

    #[test]
    fn a_credential_covers_what_its_rules_include_and_grants_travel_by_fingerprint() {
        let settings = [
            policy(&[], &["wide"], &["*"]),
            policy(&[], &["narrow"], &["echo"]),
            policy(&[], &["other"], &["add"]),
        ];
        let policies = Policies::new(&settings);
        let of = |scopes: &[&str]| {
            let scopes = scopes.iter().map(|s| s.to_string()).collect();
            let identity = Identity::authenticated("alice", scopes);
            policies.access_for(&identity).expect("a policy applies")
        };
        let (wide, narrow, other) = (of(&["wide"]), of(&["narrow"]), of(&["other"]));
        let both = of(&["narrow", "other"]);
        assert!(wide.is_unrestricted(), "a policy that allows everything");
        assert!(wide.covers(&narrow) && wide.covers(&wide));
        assert!(
            !narrow.covers(&wide),
            "restricted never covers unrestricted"
        );
        assert!(
            narrow.covers(&of(&["narrow"])),
            "the same rules, resolved again"
        );
        assert!(both.covers(&narrow) && both.covers(&other));
        assert!(!narrow.covers(&both) && !narrow.covers(&other));

        // Another node with the same policies finds the same rules by their fingerprints.
        let elsewhere = Policies::new(&settings);
        for access in [&wide, &narrow, &both] {
            let carried = elsewhere.access_of(&access.grant()).expect("known rules");
            assert_eq!(carried.grant(), access.grant());
            assert!(carried.may_use_tool("echo"));
            assert_eq!(carried.may_use_tool("add"), access.may_use_tool("add"));
        }
        // One whose policies differ grants nothing by guess.
        let mut changed = settings.clone();
        changed[1].tools.push("sleep".into());
        assert!(Policies::new(&changed).access_of(&narrow.grant()).is_none());
        assert_eq!(
            Policies::new(&changed)
                .access_of(&wide.grant())
                .map(|a| a.grant()),
            Some(Grant::Everything)
        );
    }

    #[test]
    fn wildcards_match_runs_of_characters() {
        for (pattern, text, expected) in [
            ("echo", "echo", true),
            ("echo", "echo2", false),
            ("*", "", true),
            ("tools/*", "tools/call", true),
            ("tools/*", "tool/call", false),
            ("file:///docs/*.md", "file:///docs/a/b.md", true),
            ("file:///docs/*.md", "file:///docs/a.txt", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "acb", false),
            ("*x*", "abxcd", true),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(
                wildcard_match(pattern, text),
                expected,
                "{pattern} ~ {text}"
            );
        }
    }

    #[test]
    fn no_policy_means_unrestricted_access() {
        let access = Policies::new(&[])
            .access_for(&Identity::anonymous())
            .expect("admitted");
        assert!(access.is_unrestricted());
        assert!(access.may_use_tool("anything") && access.may_call("tools/call"));
    }

    #[test]
    fn policies_apply_by_subject_scope_or_anonymity_and_unite() {
        let policies = Policies::new(&[
            policy(&["ci"], &[], &["echo"]),
            policy(&[], &["admin"], &["add"]),
            policy(&["anonymous"], &[], &["sleep"]),
        ]);
        let ci = Identity::authenticated("ci", vec!["admin".into()]);
        let access = policies.access_for(&ci).expect("ci matches");
        assert!(access.may_use_tool("echo") && access.may_use_tool("add"));
        assert!(!access.may_use_tool("sleep"));
        let anonymous = policies
            .access_for(&Identity::anonymous())
            .expect("anonymous matches");
        assert!(anonymous.may_use_tool("sleep") && !anonymous.may_use_tool("echo"));
        // An authenticated client named "anonymous" is not the unauthenticated client.
        let impostor = Identity::authenticated("anonymous", vec![]);
        assert!(policies.access_for(&impostor).is_none());
        assert!(policies
            .access_for(&Identity::authenticated("bob", vec![]))
            .is_none());
    }

    #[test]
    fn a_name_with_its_proof_matches_only_that_proof() {
        use crate::context::Proof;
        let policies = Policies::new(&[
            policy(&["jwt:alice"], &[], &["echo"]),
            policy(&["bob"], &[], &["add"]),
        ]);
        let jwt = Identity::proven(Proof::Jwt, "alice", vec![]);
        assert!(policies
            .access_for(&jwt)
            .is_some_and(|a| a.may_use_tool("echo")));
        let key = Identity::proven(Proof::ApiKey, "alice", vec![]);
        assert!(policies.access_for(&key).is_none());
        for proof in [Proof::ApiKey, Proof::Jwt, Proof::Certificate] {
            let bob = Identity::proven(proof, "bob", vec![]);
            assert!(policies.access_for(&bob).is_some(), "{proof:?}");
        }
        // A subject spelled as another proof's principal is not that identity.
        for proof in [Proof::ApiKey, Proof::Jwt, Proof::Certificate] {
            let spelled = Identity::proven(proof, "jwt:alice", vec![]);
            assert!(policies.access_for(&spelled).is_none(), "{proof:?}");
        }
    }

    #[test]
    fn initialize_and_ping_are_always_allowed() {
        let mut only_tools = policy(&["*"], &[], &["*"]);
        only_tools.methods = vec!["tools/*".into()];
        let access = Policies::new(&[only_tools])
            .access_for(&Identity::authenticated("x", vec![]))
            .expect("matches");
        assert!(access.may_call("initialize") && access.may_call("ping"));
        assert!(access.may_call("tools/list") && !access.may_call("resources/list"));
        assert_eq!(
            access.check_method("prompts/list"),
            Err(Error::MethodNotFound {
                method: "prompts/list".into()
            })
        );
    }
}
