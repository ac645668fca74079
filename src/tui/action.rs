//! Every operator action the console understands, independent of the keys
//! bound to it (see [`crate::tui::keymap`]).

use serde::{Deserialize, Serialize};

/// One thing the operator can ask the console to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Leave the console.
    Quit,
    /// Show or hide the help overlay.
    Help,
    /// Focus the next pane.
    NextPane,
    /// Focus the previous pane.
    PrevPane,
    /// Focus the breakers pane.
    FocusBreakers,
    /// Focus the limiters pane.
    FocusLimiters,
    /// Focus the budgets pane.
    FocusBudgets,
    /// Focus the fallback chains pane.
    FocusChains,
    /// Focus the events pane.
    FocusEvents,
    /// Move the selection up one row.
    Up,
    /// Move the selection down one row.
    Down,
    /// Move the selection up one page.
    PageUp,
    /// Move the selection down one page.
    PageDown,
    /// Select the first row.
    Top,
    /// Select the last row.
    Bottom,
    /// Filter the focused table.
    Filter,
    /// Cycle the sort order of the focused table.
    Sort,
    /// Force the selected breaker open.
    ForceOpen,
    /// Force the selected breaker closed.
    ForceClose,
    /// Reset the selected breaker, limiter or budget.
    Reset,
    /// Disable the selected breaker (metrics only).
    Disable,
    /// Freeze or unfreeze refills of the selected limiter.
    ToggleRefill,
    /// Freeze or unfreeze the display.
    FreezeDisplay,
    /// Cycle the injected fault of the selected provider.
    CycleFault,
    /// Start or stop the chaos drill.
    ToggleDrill,
    /// Pause or resume scrolling of the events pane.
    PauseEvents,
    /// Show the focused pane on the whole screen, or all panes again.
    Zoom,
    /// Look further back in the sparklines and latency columns: 2 min,
    /// 10 min, 1 h, and round again.
    TimeSpan,
    /// Write the screen and an incident snapshot (Markdown and JSON) to
    /// the current directory.
    WriteIncident,
    /// Everything about the selected row: a breaker's figures and its
    /// transitions' reasons in full, an event's whole text.
    Detail,
    /// Pause or resume a replay.
    ClockPause,
    /// Replay faster.
    ClockFaster,
    /// Replay slower.
    ClockSlower,
    /// Advance a paused replay by one step.
    ClockStep,
}

impl Action {
    /// Every action, in help order.
    pub const ALL: &'static [Action] = &[
        Action::Quit,
        Action::Help,
        Action::NextPane,
        Action::PrevPane,
        Action::FocusBreakers,
        Action::FocusLimiters,
        Action::FocusBudgets,
        Action::FocusChains,
        Action::FocusEvents,
        Action::Up,
        Action::Down,
        Action::PageUp,
        Action::PageDown,
        Action::Top,
        Action::Bottom,
        Action::Filter,
        Action::Sort,
        Action::ForceOpen,
        Action::ForceClose,
        Action::Reset,
        Action::Disable,
        Action::ToggleRefill,
        Action::FreezeDisplay,
        Action::CycleFault,
        Action::ToggleDrill,
        Action::PauseEvents,
        Action::Zoom,
        Action::TimeSpan,
        Action::WriteIncident,
        Action::Detail,
        Action::ClockPause,
        Action::ClockFaster,
        Action::ClockSlower,
        Action::ClockStep,
    ];

    /// The kebab-case name used in keymap files and by serde, e.g. `"force-open"`.
    pub fn name(self) -> &'static str {
        match self {
            Action::Quit => "quit",
            Action::Help => "help",
            Action::NextPane => "next-pane",
            Action::PrevPane => "prev-pane",
            Action::FocusBreakers => "focus-breakers",
            Action::FocusLimiters => "focus-limiters",
            Action::FocusBudgets => "focus-budgets",
            Action::FocusChains => "focus-chains",
            Action::FocusEvents => "focus-events",
            Action::Up => "up",
            Action::Down => "down",
            Action::PageUp => "page-up",
            Action::PageDown => "page-down",
            Action::Top => "top",
            Action::Bottom => "bottom",
            Action::Filter => "filter",
            Action::Sort => "sort",
            Action::ForceOpen => "force-open",
            Action::ForceClose => "force-close",
            Action::Reset => "reset",
            Action::Disable => "disable",
            Action::ToggleRefill => "toggle-refill",
            Action::FreezeDisplay => "freeze-display",
            Action::CycleFault => "cycle-fault",
            Action::ToggleDrill => "toggle-drill",
            Action::PauseEvents => "pause-events",
            Action::Zoom => "zoom",
            Action::TimeSpan => "time-span",
            Action::WriteIncident => "write-incident",
            Action::Detail => "detail",
            Action::ClockPause => "clock-pause",
            Action::ClockFaster => "clock-faster",
            Action::ClockSlower => "clock-slower",
            Action::ClockStep => "clock-step",
        }
    }

    /// The action with this kebab-case name, if any.
    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// One line for the help overlay, e.g. `"force the selected breaker open"`.
    pub fn description(self) -> &'static str {
        match self {
            Action::Quit => "quit",
            Action::Help => "show or hide this help",
            Action::NextPane => "focus the next pane",
            Action::PrevPane => "focus the previous pane",
            Action::FocusBreakers => "focus the breakers pane",
            Action::FocusLimiters => "focus the limiters pane",
            Action::FocusBudgets => "focus the budgets pane",
            Action::FocusChains => "focus the fallback chains pane",
            Action::FocusEvents => "focus the events pane",
            Action::Up => "move up one row",
            Action::Down => "move down one row",
            Action::PageUp => "move up one page",
            Action::PageDown => "move down one page",
            Action::Top => "go to the first row",
            Action::Bottom => "go to the last row",
            Action::Filter => "filter the focused table",
            Action::Sort => "cycle the sort order of the focused table",
            Action::ForceOpen => "force the selected breaker open",
            Action::ForceClose => "force the selected breaker closed",
            Action::Reset => "reset the selected breaker (pane 3: a user's spend-rate one)",
            Action::Disable => "disable the selected breaker (metrics only)",
            Action::ToggleRefill => "freeze/unfreeze refills of the selected limiter",
            Action::FreezeDisplay => "freeze/unfreeze the display",
            Action::CycleFault => "cycle the mock fault of the selected provider or tool",
            Action::ToggleDrill => "drill mode on/off: optional tools take their degradation branch",
            Action::PauseEvents => "pause/resume scrolling of the events pane",
            Action::Zoom => "zoom the focused pane to the whole screen, or back",
            Action::TimeSpan => "history's span: 2 min, 10 min, 1 h (sparklines, latencies)",
            Action::WriteIncident => "write the screen and an incident snapshot (.md and .json) here",
            Action::Detail => "the selected row in full",
            Action::ClockPause => "pause/resume the clock (demo and replay)",
            Action::ClockFaster => "run the clock faster",
            Action::ClockSlower => "run the clock slower",
            Action::ClockStep => "step the paused clock forward",
        }
    }

    /// Whether the action changes the runner's state (blocked by `--readonly`).
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Action::ForceOpen
                | Action::ForceClose
                | Action::Reset
                | Action::Disable
                | Action::ToggleRefill
                | Action::CycleFault
                | Action::ToggleDrill
        )
    }

    /// Whether the action is destructive and must be confirmed (unless `--yes`).
    pub fn needs_confirm(self) -> bool {
        matches!(
            self,
            Action::ForceOpen | Action::ForceClose | Action::ToggleRefill | Action::ToggleDrill
        )
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
