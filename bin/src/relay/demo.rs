//! temporary
use super::{RelayConfig, RunOptions};
pub fn run(_b: Option<RelayConfig>, _o: &RunOptions, _j: bool) -> std::process::ExitCode {
    std::process::ExitCode::from(1)
}
