//! Protocol versions this server speaks: the session era (2024-11-05 … 2025-11-25), whose
//! version `initialize` negotiates for a session, and the stateless 2026-07-28 revision, which
//! every request names in its own `_meta`.

use std::fmt;

/// The MCP revisions, oldest first so that `Ord` follows time (a feature "from version V on"
/// is `version >= V`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2024-11-05, the first.
    V2024_11_05,
    /// 2025-03-26: batches, audio, tool annotations, completions.
    V2025_03_26,
    /// 2025-06-18: titles, structured tool output, resource links, elicitation; no batches.
    V2025_06_18,
    /// 2025-11-25: icons, URL elicitation, tasks (experimental).
    V2025_11_25,
    /// 2026-07-28: stateless; every request carries its version and the client's
    /// capabilities; multi round-trip results instead of server requests.
    V2026_07_28,
}

impl ProtocolVersion {
    /// Every supported version, newest first.
    pub const ALL: [Self; 5] = [
        Self::V2026_07_28,
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];
    /// The session-era versions (what `initialize` can negotiate), newest first.
    pub const SESSION: [Self; 4] = [
        Self::V2025_11_25,
        Self::V2025_06_18,
        Self::V2025_03_26,
        Self::V2024_11_05,
    ];
    /// The stateless versions (what a request's `_meta` may name), newest first.
    pub const STATELESS: [Self; 1] = [Self::V2026_07_28];
    /// The newest session-era version.
    pub const NEWEST_SESSION: Self = Self::V2025_11_25;

    /// Whether this is a stateless (2026-07-28 on) version.
    pub fn is_stateless(self) -> bool {
        self >= Self::V2026_07_28
    }

    /// Audio content (2025-03-26 on).
    pub fn has_audio(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// Tool annotations (2025-03-26 on).
    pub fn has_tool_annotations(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// The `message` of a progress notification (2025-03-26 on).
    pub fn has_progress_messages(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// The `completions` capability and `completion/complete` (2025-03-26 on).
    pub fn has_completions(self) -> bool {
        self >= Self::V2025_03_26
    }

    /// Titles, `outputSchema`/`structuredContent`, `resource_link` content, `_meta` on
    /// content and definitions, `lastModified` annotations, elicitation (2025-06-18 on).
    pub fn has_titles_and_meta(self) -> bool {
        self >= Self::V2025_06_18
    }

    /// Icons, server description and website, URL-mode elicitation (2025-11-25 on).
    pub fn has_icons(self) -> bool {
        self >= Self::V2025_11_25
    }

    /// The version's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2024_11_05 => "2024-11-05",
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// The version called `text`, if this server speaks it.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }

    /// Lifecycle, "Version Negotiation": the server answers with the requested version when
    /// it supports it, and otherwise with another version it supports: its newest session-era
    /// one. It is
    /// then the client's choice to go on or disconnect; this is not an error.
    pub fn negotiate(requested: &str) -> Self {
        Self::SESSION
            .into_iter()
            .find(|v| v.as_str() == requested)
            .unwrap_or(Self::NEWEST_SESSION)
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn supported_versions_are_echoed_and_others_get_the_newest_session_version() {
        for v in ProtocolVersion::SESSION {
            assert_eq!(ProtocolVersion::negotiate(v.as_str()), v);
        }
        assert_eq!(
            ProtocolVersion::negotiate("2023-01-01"),
            ProtocolVersion::NEWEST_SESSION
        );
        assert_eq!(
            ProtocolVersion::negotiate("2026-07-28"),
            ProtocolVersion::NEWEST_SESSION
        );
    }
}
