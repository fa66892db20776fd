//! The entry point: a configured bus hands out publishers, subscribers and
//! session ends on the transport the configuration selects.

use std::sync::Arc;

use crate::config::{Config, StreamConfig, TransportKind};
use crate::counters::registry::{BusCounters, Role, Slots};
use crate::error::{Error, Result};
use crate::names;
use crate::service::{Datagram, ServiceThread};
use crate::session::{Session, SessionImpl};
use crate::stream::{Publisher, PublisherImpl, Subscriber, SubscriberImpl};
use crate::transport::datagram_stream::{DatagramPublisher, DatagramSubscriber};
use crate::transport::shm::{ShmPublisher, ShmSession, ShmSubscriber};
use crate::transport::tcp::TcpSession;
use crate::transport::udp;
use crate::transport::verbs::{self, RcSession, UdLink, UdLinkConfig};

/// A configured bus. Cheap to clone; each handle it creates is owned by one
/// thread.
#[derive(Debug, Clone)]
pub struct Bus {
    config: Arc<Config>,
    transport: TransportKind,
    /// The service thread (`[service] thread = true`); stops when the last
    /// clone of the bus is dropped.
    service: Option<Arc<ServiceThread>>,
    /// The bus's counters file (`[counters] enabled`); none when disabled
    /// or when it could not be created (logged).
    counters: Option<Arc<BusCounters>>,
}

impl Bus {
    /// Checks `config` and resolves `transport = "auto"`.
    pub fn new(config: Config) -> Result<Bus> {
        config.validate("<config>")?;
        let counters = if config.counters.enabled {
            match BusCounters::create(&config.counters, &config.shm.prefix) {
                Ok(c) => Some(c),
                Err(e) => {
                    // Counting must not stop trading: the bus runs, unseen.
                    log::warn!(
                        "this bus runs without a counters file (mdbus-stat will not see it): {e}"
                    );
                    None
                }
            }
        } else {
            None
        };
        let note = |p: &verbs::ActivePort| {
            if let Some(c) = &counters {
                c.note_port(&p.device, p.port);
            }
        };
        let transport = match config.transport {
            TransportKind::Auto => match verbs::detect(&config.verbs) {
                Ok(p) => {
                    note(&p);
                    log::info!("transport auto: using verbs: {}", describe_port(&p));
                    TransportKind::Verbs
                }
                Err(why) => {
                    log::info!("transport auto: using shared memory: {why}");
                    TransportKind::Shm
                }
            },
            TransportKind::Verbs => match verbs::detect(&config.verbs) {
                Ok(p) => {
                    note(&p);
                    log::info!("transport verbs: {}", describe_port(&p));
                    TransportKind::Verbs
                }
                Err(reason) => {
                    return Err(Error::TransportUnavailable {
                        transport: "verbs",
                        reason,
                    })
                }
            },
            TransportKind::Shm => TransportKind::Shm,
            // One IP transport under either name: streams on UDP multicast,
            // sessions on TCP.
            TransportKind::Udp | TransportKind::Tcp => config.transport,
        };
        let service = if config.service.thread {
            Some(Arc::new(ServiceThread::start(&config.service)?))
        } else {
            None
        };
        Ok(Bus {
            config: Arc::new(config),
            transport,
            service,
            counters,
        })
    }

    /// The path of the bus's counters file, when it has one.
    pub fn counters_path(&self) -> Option<&std::path::Path> {
        self.counters.as_ref().map(|c| c.file().path())
    }

    /// The bus's counters file, when it has one (tools add their own
    /// errors to its log with [`BusCounters::record_error`]).
    pub fn counters(&self) -> Option<&Arc<BusCounters>> {
        self.counters.as_ref()
    }

    /// Slots for a new handle; none when the bus has no counters file or
    /// it is full (logged: the handle works, uncounted).
    pub(crate) fn slots(&self, role: Role, name: &str) -> Option<Slots> {
        let c = self.counters.as_ref()?;
        match c.open(role, name) {
            Ok(s) => Some(s),
            Err(e) => {
                log::warn!("{name} is not counted: {e}");
                None
            }
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The transport in use (never `Auto`).
    pub fn transport(&self) -> TransportKind {
        self.transport
    }

    /// Creates the publisher of stream `name`. Only one may exist per
    /// stream; a stale one left by a dead process is replaced.
    pub fn publisher(&self, name: &str) -> Result<Publisher> {
        names::check(name)?;
        let cfg = self.config.stream(name);
        let inner =
            match self.transport {
                TransportKind::Shm => {
                    PublisherImpl::Shm(ShmPublisher::create(&self.config.shm, name, &cfg)?)
                }
                TransportKind::Udp | TransportKind::Tcp => PublisherImpl::Udp(
                    DatagramPublisher::new(name, &cfg, udp::lines(name, &cfg, true)?)?,
                ),
                TransportKind::Verbs => PublisherImpl::Ud(DatagramPublisher::new(
                    name,
                    &cfg,
                    self.ud_lines(name, &cfg, true)?,
                )?),
                other => return Err(self.no_streams(other)),
            };
        // Datagram publishers go to the service thread when there is one.
        let inner = match (&self.service, inner) {
            (Some(s), PublisherImpl::Udp(p)) => PublisherImpl::Served(s.serve(Datagram::Udp(p))),
            (Some(s), PublisherImpl::Ud(p)) => PublisherImpl::Served(s.serve(Datagram::Ud(p))),
            (_, inner) => inner,
        };
        Ok(Publisher::new(
            inner,
            name,
            cfg.timestamps,
            self.slots(Role::Publisher, name),
        ))
    }

    /// Subscribes to stream `name`, waiting up to `shm.attach_timeout` for
    /// its publisher to appear.
    pub fn subscriber(&self, name: &str) -> Result<Subscriber> {
        names::check(name)?;
        let cfg = self.config.stream(name);
        if cfg.late_join == crate::config::LateJoin::Archive {
            return crate::archive::subscribe_from(self, name, cfg.archive_from);
        }
        self.subscriber_with(name, &cfg)
    }

    /// Subscribes to stream `name` with the settings `cfg` (the archive's
    /// recorder and replay use their own `late_join`).
    pub(crate) fn subscriber_with(&self, name: &str, cfg: &StreamConfig) -> Result<Subscriber> {
        let inner = self.subscriber_impl(name, cfg)?;
        Ok(self.wrap_subscriber(inner, name, cfg.poll_batch))
    }

    /// A subscriber handle, counted in the bus's counters file, around a
    /// transport end.
    pub(crate) fn wrap_subscriber(
        &self,
        inner: SubscriberImpl,
        name: &str,
        batch: usize,
    ) -> Subscriber {
        Subscriber::new(inner, name, batch, self.slots(Role::Subscriber, name))
    }

    /// The transport end of a subscriber of `name` with settings `cfg`.
    pub(crate) fn subscriber_impl(&self, name: &str, cfg: &StreamConfig) -> Result<SubscriberImpl> {
        names::check(name)?;
        let mut cfg = cfg.clone();
        if cfg.late_join == crate::config::LateJoin::Archive {
            // The live part of a replay starts as early as it can.
            cfg.late_join = crate::config::LateJoin::Oldest;
        }
        let inner = match self.transport {
            TransportKind::Shm => {
                SubscriberImpl::Shm(ShmSubscriber::attach(&self.config.shm, name, &cfg)?)
            }
            TransportKind::Udp | TransportKind::Tcp => SubscriberImpl::Udp(
                DatagramSubscriber::new(name, &cfg, udp::lines(name, &cfg, false)?)?,
            ),
            TransportKind::Verbs => SubscriberImpl::Ud(DatagramSubscriber::new(
                name,
                &cfg,
                self.ud_lines(name, &cfg, false)?,
            )?),
            other => return Err(self.no_streams(other)),
        };
        Ok(inner)
    }

    /// Offers session `name` and waits up to its `connect_timeout` for the
    /// peer to connect.
    pub fn session_accept(&self, name: &str) -> Result<Session> {
        names::check(name)?;
        let cfg = self.config.session(name);
        let inner = match self.transport {
            TransportKind::Udp | TransportKind::Tcp => {
                SessionImpl::Tcp(TcpSession::accept(name, &cfg)?)
            }
            TransportKind::Verbs => {
                SessionImpl::Verbs(RcSession::accept(name, &cfg, &self.config.verbs)?)
            }
            _ => SessionImpl::Shm(ShmSession::accept(&self.config.shm, name, &cfg)?),
        };
        Ok(self.session(inner, name))
    }

    /// Connects to session `name`, waiting up to its `connect_timeout` for
    /// the acceptor.
    pub fn session_connect(&self, name: &str) -> Result<Session> {
        names::check(name)?;
        let cfg = self.config.session(name);
        let inner = match self.transport {
            TransportKind::Udp | TransportKind::Tcp => {
                SessionImpl::Tcp(TcpSession::connect(name, &cfg)?)
            }
            TransportKind::Verbs => {
                SessionImpl::Verbs(RcSession::connect(name, &cfg, &self.config.verbs)?)
            }
            _ => SessionImpl::Shm(ShmSession::connect(&self.config.shm, name, &cfg)?),
        };
        Ok(self.session(inner, name))
    }

    fn no_streams(&self, t: TransportKind) -> Error {
        Error::TransportUnavailable {
            transport: t.name(),
            reason: "it carries no streams".into(),
        }
    }

    /// The UD multicast lines (A, and B when configured) of stream `name`;
    /// a publisher's (`send_only`) do not receive the group.
    fn ud_lines(&self, name: &str, cfg: &StreamConfig, send_only: bool) -> Result<Vec<UdLink>> {
        let channel = format!("stream `{name}`");
        let v = &self.config.verbs;
        let join = |line_b| -> Result<UdLink> {
            let link = UdLinkConfig {
                recv_depth: v.ud_recv_depth,
                send_depth: v.ud_send_depth,
                join_timeout: v.join_timeout,
                send_only,
                ..UdLinkConfig::from_stream(name, cfg, line_b)?
            };
            UdLink::join(&channel, &link, v)
        };
        let mut lines = vec![join(false)?];
        if !cfg.group_b.is_empty() {
            lines.push(join(true)?);
        }
        Ok(lines)
    }

    fn session(&self, inner: SessionImpl, name: &str) -> Session {
        let cfg = self.config.session(name);
        Session::new(
            inner,
            name,
            cfg.timestamps,
            cfg.poll_batch,
            self.config.threads.wait,
            self.slots(Role::Session, name),
        )
    }
}

/// "rxe0 port 1 is ACTIVE (MTU 1024, no NUMA node reported)", for the log.
fn describe_port(p: &verbs::ActivePort) -> String {
    let node = match p.numa_node {
        Some(n) => format!("NUMA node {n}"),
        None => "no NUMA node reported".into(),
    };
    format!(
        "{} port {} is ACTIVE (MTU {}, {node})",
        p.device, p.port, p.active_mtu
    )
}
