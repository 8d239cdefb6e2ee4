//! Gray release of tool versions: which version of a tool registered in several versions
//! ([`Tool::version`](crate::Tool::version)) a session sees, from the `[[rollout.rules]]` of
//! the settings and the session's identity.
//!
//! The choice is a pure function of the rules, the identity's subject, the tool's name and
//! the versions registered, so a session's lists and calls agree (one version of a name per
//! session), and every session of an identity, on any node, sees the same version:
//!
//! 1. The first rule for the tool whose version is registered and that selects the
//!    identity: the identity is in its `identities`, or its [`bucket`] for the tool is below
//!    `percent` (in hundredths of a percent).
//! 2. Otherwise the tool's default version: the lowest registered version that no rule
//!    names (so registering a new version changes nothing until a rule serves it); when
//!    every registered version is named by a rule, the lowest.
//!
//! Versions are ordered by `compare_versions`: dot-separated parts, numeric parts as
//! numbers (`2` < `10`, `1.9` < `1.10`), others as text.

use crate::config::RolloutRule;
use crate::registry::VersionChooser;
use std::sync::Arc;

/// Buckets an identity falls in, per tool: `percent` counts hundredths of a percent.
pub const BUCKETS: u32 = 10_000;

/// The rollout rules of a server; see the module docs.
#[derive(Debug, Default)]
pub struct Rollout {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    tool: String,
    version: String,
    identities: Vec<String>,
    /// Identities whose bucket is below this are selected.
    threshold: u32,
}

impl Rule {
    fn selects(&self, subject: &str) -> bool {
        self.identities.iter().any(|i| i == subject) || bucket(subject, &self.tool) < self.threshold
    }
}

impl Rollout {
    /// The rollout of these rules (checked by `Settings::validate`).
    pub fn new(rules: &[RolloutRule]) -> Self {
        Self {
            rules: rules
                .iter()
                .map(|rule| Rule {
                    tool: rule.tool.clone(),
                    version: rule.version.clone(),
                    identities: rule.identities.clone(),
                    threshold: (rule.percent.clamp(0.0, 100.0) * f64::from(BUCKETS) / 100.0).round()
                        as u32,
                })
                .collect(),
        }
    }

    /// Which of `versions` (the registered versions of `tool`, lowest first) the identity
    /// `subject` sees: an index into `versions` (0 when it is empty).
    pub fn choose(&self, subject: &str, tool: &str, versions: &[Arc<str>]) -> usize {
        let rules = || self.rules.iter().filter(move |rule| rule.tool == tool);
        for rule in rules() {
            if let Some(index) = versions.iter().position(|v| **v == *rule.version) {
                if rule.selects(subject) {
                    return index;
                }
            }
        }
        versions
            .iter()
            .position(|v| !rules().any(|rule| **v == *rule.version))
            .unwrap_or(0)
    }

    /// The chooser of a session whose identity's subject is `subject`.
    pub fn for_subject<'a>(&'a self, subject: &'a str) -> SubjectChoice<'a> {
        SubjectChoice {
            rollout: self,
            subject,
        }
    }
}

/// The version choice of one identity (see [`Rollout::for_subject`]).
#[derive(Debug, Clone, Copy)]
pub struct SubjectChoice<'a> {
    rollout: &'a Rollout,
    subject: &'a str,
}

impl VersionChooser for SubjectChoice<'_> {
    fn choose(&self, tool: &str, versions: &[Arc<str>]) -> usize {
        self.rollout.choose(self.subject, tool, versions)
    }
}

/// The bucket (0 to [`BUCKETS`] - 1) of an identity for a tool. Stable across processes,
/// nodes and releases: FNV-1a (64 bits) over the tool's name, a 0xff byte (never in UTF-8,
/// so `("ab", "c")` and `("a", "bc")` differ), and the subject, then the SplitMix64
/// finalizer so that every bit of the hash counts, modulo [`BUCKETS`]. The tool's name is in
/// the hash so that each tool's rollout reaches a different share of identities.
pub fn bucket(subject: &str, tool: &str) -> u32 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let bytes = tool
        .bytes()
        .chain(std::iter::once(0xff))
        .chain(subject.bytes());
    let mut hash = bytes.fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^= hash >> 31;
    (hash % u64::from(BUCKETS)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: &str, version: &str, identities: &[&str], percent: f64) -> RolloutRule {
        RolloutRule {
            tool: tool.into(),
            version: version.into(),
            identities: identities.iter().map(|s| s.to_string()).collect(),
            percent,
        }
    }

    fn versions(list: &[&str]) -> Vec<Arc<str>> {
        list.iter().map(|v| Arc::from(*v)).collect()
    }

    #[test]
    fn an_allow_list_selects_exactly_its_identities() {
        let rollout = Rollout::new(&[rule("search", "2", &["alice", "bob"], 0.0)]);
        let registered = versions(&["1", "2"]);
        for subject in ["alice", "bob"] {
            assert_eq!(
                rollout.choose(subject, "search", &registered),
                1,
                "{subject}"
            );
        }
        for subject in ["carol", "anonymous", "alice2", "ALICE", ""] {
            assert_eq!(
                rollout.choose(subject, "search", &registered),
                0,
                "{subject}"
            );
        }
        // Another tool of the same name prefix is not touched by the rule.
        assert_eq!(rollout.choose("alice", "search2", &registered), 0);
    }

    #[test]
    fn a_percentage_selects_about_that_share_and_each_identity_keeps_its_choice() {
        let registered = versions(&["1", "2"]);
        for percent in [0.0, 1.0, 10.0, 37.5, 50.0, 90.0, 100.0] {
            let rollout = Rollout::new(&[rule("search", "2", &[], percent)]);
            let subjects: Vec<String> = (0..20_000).map(|i| format!("user-{i}")).collect();
            let selected = subjects
                .iter()
                .filter(|s| rollout.choose(s, "search", &registered) == 1)
                .count();
            let share = selected as f64 / subjects.len() as f64 * 100.0;
            // 20 000 draws: the binomial standard deviation is at most 0.35 points.
            assert!(
                (share - percent).abs() <= 1.5,
                "{percent}% rule selected {share:.2}%"
            );
            if percent == 0.0 || percent == 100.0 {
                assert_eq!(share, percent, "0 and 100 are exact");
            }
            // The same identity gets the same answer from a rollout built again (another
            // session, another node).
            let again = Rollout::new(&[rule("search", "2", &[], percent)]);
            for s in subjects.iter().take(500) {
                assert_eq!(
                    rollout.choose(s, "search", &registered),
                    again.choose(s, "search", &registered)
                );
            }
        }
    }

    #[test]
    fn a_larger_percentage_keeps_everyone_it_had() {
        // Raising the percentage only adds identities: nobody flips back.
        let registered = versions(&["1", "2"]);
        let small = Rollout::new(&[rule("search", "2", &[], 10.0)]);
        let large = Rollout::new(&[rule("search", "2", &[], 30.0)]);
        for i in 0..5_000 {
            let s = format!("user-{i}");
            if small.choose(&s, "search", &registered) == 1 {
                assert_eq!(large.choose(&s, "search", &registered), 1, "{s}");
            }
        }
    }

    #[test]
    fn buckets_are_fixed_values_and_depend_on_the_tool() {
        // Pinned: a change of the hash would move identities between versions on upgrade.
        assert_eq!(bucket("alice", "search"), bucket("alice", "search"));
        let pinned: Vec<u32> = ["alice", "bob", "anonymous"]
            .iter()
            .map(|s| bucket(s, "search"))
            .collect();
        assert_eq!(pinned, expected_pinned_buckets());
        let differing = (0..1000)
            .filter(|i| {
                let s = format!("user-{i}");
                bucket(&s, "search") != bucket(&s, "fetch")
            })
            .count();
        assert!(differing > 990, "{differing}");
        assert_ne!(bucket("b", "a"), bucket("", "ab"));
    }

    /// The documented algorithm (FNV-1a 64 over tool, 0xff, subject; SplitMix64 finalizer;
    /// modulo 10 000) computed by an independent implementation (Python), pinned here.
    fn expected_pinned_buckets() -> Vec<u32> {
        vec![6243, 8787, 1868]
    }

    #[test]
    fn the_default_is_the_lowest_version_no_rule_names() {
        let registered = versions(&["1", "2", "3"]);
        let dark = Rollout::new(&[rule("search", "1", &[], 0.0)]);
        assert_eq!(dark.choose("x", "search", &registered), 1, "1 is named: 2");
        let none = Rollout::new(&[]);
        assert_eq!(none.choose("x", "search", &registered), 0);
        let all = Rollout::new(&[
            rule("search", "1", &[], 0.0),
            rule("search", "2", &[], 0.0),
            rule("search", "3", &[], 0.0),
        ]);
        assert_eq!(
            all.choose("x", "search", &registered),
            0,
            "all named: lowest"
        );
        // A rule naming a version that is not registered is skipped.
        let missing = Rollout::new(&[rule("search", "9", &["x"], 100.0)]);
        assert_eq!(missing.choose("x", "search", &registered), 0);
    }

    #[test]
    fn the_first_selecting_rule_wins() {
        let registered = versions(&["1", "2", "3"]);
        let rollout = Rollout::new(&[
            rule("search", "3", &["alice"], 0.0),
            rule("search", "2", &["alice", "bob"], 0.0),
        ]);
        assert_eq!(rollout.choose("alice", "search", &registered), 2);
        assert_eq!(rollout.choose("bob", "search", &registered), 1);
        assert_eq!(rollout.choose("carol", "search", &registered), 0);
    }

    #[test]
    fn versions_order_numerically_by_part() {
        let mut list = vec!["10", "2", "1.10", "1.9", "1", "beta", "1.0", "2.a"];
        list.sort_by(|a, b| crate::registry::compare_versions(a, b));
        assert_eq!(
            list,
            vec!["1", "1.0", "1.9", "1.10", "2", "2.a", "10", "beta"]
        );
    }
}
