//! The method table: every request method the server serves, the capability it belongs to,
//! and the first protocol version that has it. A method of a capability the server did not
//! declare for the session's version answers -32601, like an unknown one.

/// Server capabilities, as declared in the `initialize` result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capability {
    Tools,
    Resources,
    Prompts,
    Logging,
    Completions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Initialize,
    /// 2026-07-28.
    Discover,
    /// 2026-07-28.
    SubscriptionsListen,
    /// 2026-07-28, tasks extension.
    TasksGet,
    /// 2026-07-28, tasks extension.
    TasksUpdate,
    /// 2026-07-28, tasks extension.
    TasksCancel,
    Ping,
    ToolsList,
    ToolsCall,
    ResourcesList,
    ResourcesRead,
    ResourceTemplatesList,
    ResourcesSubscribe,
    ResourcesUnsubscribe,
    PromptsList,
    PromptsGet,
    LoggingSetLevel,
    CompletionComplete,
}

impl Method {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "initialize" => Self::Initialize,
            "server/discover" => Self::Discover,
            "subscriptions/listen" => Self::SubscriptionsListen,
            "tasks/get" => Self::TasksGet,
            "tasks/update" => Self::TasksUpdate,
            "tasks/cancel" => Self::TasksCancel,
            "ping" => Self::Ping,
            "tools/list" => Self::ToolsList,
            "tools/call" => Self::ToolsCall,
            "resources/list" => Self::ResourcesList,
            "resources/read" => Self::ResourcesRead,
            "resources/templates/list" => Self::ResourceTemplatesList,
            "resources/subscribe" => Self::ResourcesSubscribe,
            "resources/unsubscribe" => Self::ResourcesUnsubscribe,
            "prompts/list" => Self::PromptsList,
            "prompts/get" => Self::PromptsGet,
            "logging/setLevel" => Self::LoggingSetLevel,
            "completion/complete" => Self::CompletionComplete,
            _ => return None,
        })
    }

    pub fn capability(self) -> Option<Capability> {
        match self {
            Self::Initialize
            | Self::Ping
            | Self::Discover
            | Self::SubscriptionsListen
            | Self::TasksGet
            | Self::TasksUpdate
            | Self::TasksCancel => None,
            Self::ToolsList | Self::ToolsCall => Some(Capability::Tools),
            Self::ResourcesList
            | Self::ResourcesRead
            | Self::ResourceTemplatesList
            | Self::ResourcesSubscribe
            | Self::ResourcesUnsubscribe => Some(Capability::Resources),
            Self::PromptsList | Self::PromptsGet => Some(Capability::Prompts),
            Self::LoggingSetLevel => Some(Capability::Logging),
            Self::CompletionComplete => Some(Capability::Completions),
        }
    }

    /// The member of this method's params that names what it acts on (a 2026-07-28
    /// request's `Mcp-Name` header repeats it), if it has one.
    pub fn target(self) -> Option<Target> {
        match self {
            Self::ToolsCall | Self::PromptsGet => Some(Target::Name),
            Self::ResourcesRead => Some(Target::Uri),
            Self::TasksGet | Self::TasksUpdate | Self::TasksCancel => Some(Target::TaskId),
            _ => None,
        }
    }

    /// Whether only 2026-07-28 requests have this method (a session-era session does not).
    pub fn is_stateless_only(self) -> bool {
        matches!(
            self,
            Self::Discover
                | Self::SubscriptionsListen
                | Self::TasksGet
                | Self::TasksUpdate
                | Self::TasksCancel
        )
    }

    /// Whether a draining server still answers the method: it starts no new work, only
    /// reading what the server holds or steering a task already running, and a client
    /// finishing its last call may need it (the Python SDK lists the tools after a call, to
    /// check the result's schema), and a task runs on for the grace (its client polls it,
    /// answers its questions, or cancels it).
    pub fn answered_while_draining(self) -> bool {
        matches!(
            self,
            Self::Ping
                | Self::ToolsList
                | Self::ResourcesList
                | Self::ResourceTemplatesList
                | Self::PromptsList
                | Self::Discover
                | Self::TasksGet
                | Self::TasksUpdate
                | Self::TasksCancel
        )
    }
}

/// The params member that names what a request acts on ([`Method::target`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `name`: the tool or prompt.
    Name,
    /// `uri`: the resource.
    Uri,
    /// `taskId`: the task.
    TaskId,
}

/// Notification method names, both directions.
pub mod notifications {
    pub const INITIALIZED: &str = "notifications/initialized";
    pub const CANCELLED: &str = "notifications/cancelled";
    pub const PROGRESS: &str = "notifications/progress";
    pub const MESSAGE: &str = "notifications/message";
    pub const TOOLS_LIST_CHANGED: &str = "notifications/tools/list_changed";
    pub const RESOURCES_LIST_CHANGED: &str = "notifications/resources/list_changed";
    pub const PROMPTS_LIST_CHANGED: &str = "notifications/prompts/list_changed";
    pub const RESOURCES_UPDATED: &str = "notifications/resources/updated";
    pub const ROOTS_LIST_CHANGED: &str = "notifications/roots/list_changed";
    /// 2026-07-28, tasks extension: a task's status, on a `subscriptions/listen` stream.
    pub const TASKS: &str = "notifications/tasks";
}
