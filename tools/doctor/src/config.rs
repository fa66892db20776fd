//! What a configuration names: an mdbus configuration, or an
//! `mdbus-relay` configuration whose `[bus]` table is one (with its
//! `[thread]` core and device and `[input]`/`[passthrough]` interfaces).

use std::net::Ipv4Addr;
use std::path::Path;

use mdbus::config::read_config_text;
use mdbus::Config;

use crate::{BusNeeds, Options};

/// Adds what the configuration at `path` names to `opts`.
pub(crate) fn load(opts: &mut Options, path: &Path) -> Result<(), String> {
    let name = path.display().to_string();
    let text = read_config_text(path).map_err(|e| format!("{name} {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| format!("{name}: {}", e.message().trim()))?;
    // A relay configuration has an [input]; its [bus] (shared memory with
    // every default when absent) is the mdbus configuration.
    let relay = table.contains_key("input") || table.contains_key("bus");
    let bus = match table.get("bus") {
        _ if !relay => Config::from_toml_str(&text, &name),
        Some(toml::Value::Table(bus)) => {
            let bus_text = toml::to_string(bus).map_err(|e| format!("{name}: [bus]: {e}"))?;
            Config::from_toml_str(&bus_text, &format!("{name} [bus]"))
        }
        Some(_) => return Err(format!("{name}: `bus` is not a table")),
        None => Config::from_toml_str("transport = \"shm\"", &format!("{name} [bus]")),
    }
    .map_err(|e| e.to_string())?;
    if relay {
        relay_extras(opts, &table, &name)?;
    }
    add_bus(opts, &bus);
    opts.config = Some(path.to_path_buf());
    Ok(())
}

fn push_unique<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if !v.contains(&x) {
        v.push(x);
    }
}

/// An interface address from a configuration: empty means none.
fn address(opts: &mut Options, value: &str, key: &str, name: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    let ip: Ipv4Addr = value
        .parse()
        .map_err(|_| format!("{name}: {key}: `{value}` is not an IPv4 address"))?;
    if !ip.is_unspecified() {
        push_unique(&mut opts.addresses, ip);
    }
    Ok(())
}

/// The relay's `[thread]` core and device, and its interface addresses.
fn relay_extras(opts: &mut Options, table: &toml::Table, name: &str) -> Result<(), String> {
    let get = |section: &str, key: &str| table.get(section).and_then(|s| s.get(key)).cloned();
    match get("thread", "core") {
        Some(toml::Value::Integer(c)) if c >= 0 => {
            push_unique(&mut opts.cores, usize::try_from(c).unwrap_or(usize::MAX));
        }
        Some(toml::Value::Integer(-1)) | None => {}
        Some(other) => {
            return Err(format!(
                "{name}: thread.core: {other} is not a core: -1 (automatic) or a core number"
            ))
        }
    }
    if let Some(toml::Value::String(d)) = get("thread", "device") {
        if !d.is_empty() {
            push_unique(&mut opts.devices, d);
        }
    }
    for (section, key) in [
        ("input", "interface"),
        ("input", "interface_b"),
        ("passthrough", "interface"),
    ] {
        if let Some(toml::Value::String(a)) = get(section, key) {
            address(opts, &a, &format!("{section}.{key}"), name)?;
        }
    }
    Ok(())
}

fn add_bus(opts: &mut Options, cfg: &Config) {
    for d in [&cfg.threads.device, &cfg.verbs.device] {
        if !d.is_empty() {
            push_unique(&mut opts.devices, d.clone());
        }
    }
    if let Some(core) = cfg.service.core {
        push_unique(&mut opts.cores, core);
    }
    let mut max_datagram = None;
    for (key, s) in &cfg.streams {
        // Validated by Config already: IPv4 addresses or empty.
        let _ = address(opts, &s.interface, &format!("streams.{key}.interface"), "");
        let _ = address(
            opts,
            &s.interface_b,
            &format!("streams.{key}.interface_b"),
            "",
        );
        if !s.group.is_empty() {
            max_datagram = max_datagram.max(Some(s.max_datagram));
        }
    }
    let sizes = cfg.channel_sizes();
    let segments = || sizes.iter().filter(|(_, seg)| *seg).map(|(b, _)| *b);
    let huge_page = mdbus::sys::hugepages::HUGE_PAGE as u64;
    opts.bus = Some(BusNeeds {
        transport: cfg.transport,
        huge_page_policy: cfg.shm.huge_pages,
        hugetlbfs: cfg.shm.hugetlbfs.clone(),
        mlock: cfg.shm.mlock,
        channel_bytes: sizes.iter().map(|(b, _)| *b).sum(),
        segment_bytes: segments().sum(),
        // Each segment is rounded up to whole huge pages.
        huge_pages: segments().map(|b| b.div_ceil(huge_page)).sum(),
        port: cfg.verbs.port,
        max_datagram,
    });
}
