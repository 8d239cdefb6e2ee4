//! Authorization: which tools, resources, prompts and methods each client may use, from the
//! allow-lists of `[[auth.policies]]`.
//!
//! The perimeter resolves a client's [`Access`] once, when it is admitted, from the policies
//! matching its identity or scopes. What a client may not use does not exist for it: a
//! forbidden method is answered like an unknown method (-32601), a forbidden tool like an
//! unknown tool, a forbidden prompt like an unknown prompt, a forbidden resource as not found,
//! and lists leave them out. With no policy configured every client has unrestricted access,
//! which costs a request one branch on `None`.

use crate::config::PolicySettings;
use crate::context::Identity;
use crate::protocol::mcp::Error;
use crate::registry::ListKind;
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
    /// is configured (unrestricted).
    rules: Option<Arc<[Arc<Rule>]>>,
    /// The access of another credential this one is narrowed by (a request's own, on a
    /// session opened with another): what it refuses is refused.
    narrower: Option<Arc<Access>>,
}

impl Policies {
    /// The policies of `auth.policies`.
    pub fn new(settings: &[PolicySettings]) -> Self {
        let rules = settings
            .iter()
            .map(|p| {
                Arc::new(Rule {
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
            narrower: None,
        })
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
                // `key:alice`, `jwt:alice`, `cert:…` only the identity of that proof.
                entry == "*"
                    || (entry != "anonymous"
                        && (entry == identity.subject() || entry == identity.principal()))
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
            && self
                .narrower
                .as_ref()
                .is_none_or(|other| other.is_unrestricted())
    }

    /// What both this access and `other` allow: a request on a session is served with what
    /// the session's credential and the request's own both grant (the narrower wins).
    pub fn narrowed_by(&self, other: &Access) -> Access {
        // The usual case, a request with the session's own credential, narrows nothing (and
        // allocates nothing): the same policies apply, the same `Rule`s.
        if other.is_unrestricted() || self.grants_as(other) {
            return self.clone();
        }
        if self.is_unrestricted() {
            return other.clone();
        }
        Access {
            rules: self.rules.clone(),
            narrower: Some(Arc::new(match &self.narrower {
                // Already narrowed once: narrow the narrower (a chain, not a tree).
                Some(narrower) => narrower.narrowed_by(other),
                None => other.clone(),
            })),
        }
    }

    /// Whether `other` is made of exactly the same rules, unnarrowed.
    fn grants_as(&self, other: &Access) -> bool {
        match (&self.rules, &other.rules, &self.narrower, &other.narrower) {
            (Some(mine), Some(theirs), None, None) => {
                mine.len() == theirs.len()
                    && mine
                        .iter()
                        .zip(theirs.iter())
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            }
            _ => false,
        }
    }

    fn allows(&self, pick: impl Fn(&Rule) -> &Patterns + Copy, name: &str) -> bool {
        let own = match &self.rules {
            None => true,
            Some(rules) => rules.iter().any(|rule| pick(rule).matches(name)),
        };
        own && self
            .narrower
            .as_ref()
            .is_none_or(|other| other.allows(pick, name))
    }

    /// Whether the client may call `method`.
    pub fn may_call(&self, method: &str) -> bool {
        let own = self.rules.is_none()
            || ALWAYS_ALLOWED.contains(&method)
            || self
                .rules
                .as_ref()
                .is_some_and(|rules| rules.iter().any(|rule| rule.methods.matches(method)));
        own && self
            .narrower
            .as_ref()
            .is_none_or(|other| other.may_call(method))
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
    fn a_narrower_credential_narrows_and_the_same_one_is_taken_as_is() {
        let policies = Policies::new(&[
            policy(&[], &["wide"], &["*"]),
            policy(&[], &["narrow"], &["echo"]),
        ]);
        let of = |scope: &str| {
            let identity = Identity::authenticated("alice", vec![scope.to_owned()]);
            policies.access_for(&identity).expect("a policy applies")
        };
        let (wide, narrow) = (of("wide"), of("narrow"));
        let same = wide.narrowed_by(&of("wide"));
        assert!(same.narrower.is_none(), "the same rules: nothing to narrow");
        assert!(same.may_use_tool("add"));
        let narrowed = wide.narrowed_by(&narrow);
        assert!(narrowed.may_use_tool("echo"));
        assert!(!narrowed.may_use_tool("add"));
        assert!(
            !narrow.narrowed_by(&wide).may_use_tool("add"),
            "either way round"
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
