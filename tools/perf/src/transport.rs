//! Which transports this build measures, and the bus each run uses.
//!
//! Adding a transport: list it in `MEASURABLE`, and give [`bus`] whatever
//! it needs beyond the shared settings (addresses, a device). The commands
//! only ever see an [`mdbus::Bus`], so little else changes: `verbs` takes
//! its device options (the `verbs` table of the configuration) here, and
//! its addresses from [`crate::verbs`].

use std::time::Duration;

use mdbus::{Config, TransportKind};

use crate::common::{Common, Failure};

/// The transports mdbus-perf can run in this build.
const MEASURABLE: &[TransportKind] = &[
    TransportKind::Shm,
    TransportKind::Udp,
    TransportKind::Tcp,
    TransportKind::Verbs,
];

/// Fails unless this build can measure `kind`.
pub fn check(kind: TransportKind) -> Result<(), Failure> {
    if MEASURABLE.contains(&kind) {
        Ok(())
    } else {
        Err(Failure::Unavailable(format!(
            "transport {} is not available in this build",
            kind.name()
        )))
    }
}

/// Fails unless this build can measure the run's transport and, for
/// verbs, this machine has the device: before anything else of the run
/// (core placement included), so a refusal is the one line that says why.
pub fn ready(common: &Common) -> Result<(), Failure> {
    check(common.transport)?;
    crate::verbs::check_options(common)?;
    if common.transport == TransportKind::Verbs {
        let mut cfg = load(common)?;
        crate::verbs::configure(common, &mut cfg.verbs);
        available(&cfg)?;
    }
    Ok(())
}

fn load(common: &Common) -> Result<Config, Failure> {
    match &common.config {
        Some(path) => Config::from_file(path).map_err(|e| Failure::Usage(e.to_string())),
        None => Ok(Config::default()),
    }
}

/// The library's sentence when verbs has no active port here.
fn available(cfg: &Config) -> Result<(), Failure> {
    mdbus::transport::verbs::detect(&cfg.verbs)
        .map(|_| ())
        .map_err(|reason| {
            mdbus::Error::TransportUnavailable {
                transport: "verbs",
                reason,
            }
            .into()
        })
}

/// Builds the bus for a run: the configuration file (if any), with the
/// transport, timeouts and channels of this run set over it.
pub fn bus(common: &Common, channels: impl FnOnce(&mut Config)) -> Result<mdbus::Bus, Failure> {
    check(common.transport)?;
    let mut cfg = load(common)?;
    cfg.transport = common.transport;
    cfg.shm.attach_timeout = Duration::from_secs(common.timeout);
    cfg.threads.wait = common.wait;
    crate::verbs::check_options(common)?;
    if common.transport == TransportKind::Verbs {
        crate::verbs::configure(common, &mut cfg.verbs);
        // Before the channels: their addresses come from the device, and
        // a machine without one gets the library's sentence, not a lookup
        // failure.
        available(&cfg)?;
    }
    channels(&mut cfg);
    match mdbus::Bus::new(cfg) {
        Ok(bus) => Ok(bus),
        Err(mdbus::Error::Config(e)) => Err(Failure::Usage(e.to_string())),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_measurable_transports_pass_the_check() {
        for kind in [
            TransportKind::Shm,
            TransportKind::Udp,
            TransportKind::Tcp,
            TransportKind::Verbs,
        ] {
            assert!(check(kind).is_ok(), "{}", kind.name());
        }
        let err = check(TransportKind::Auto).unwrap_err();
        assert_eq!(
            err.to_string(),
            "transport auto is not available in this build"
        );
    }
}
