//! Memory placed on a device's NUMA node by policy: the node comes from a
//! fake sysfs tree, the policy is read back from `/proc/self/numa_maps`
//! (`prefer:N` on the mapping). Node 0 exists on every Linux host, so the
//! test runs on a single-node machine too.

use std::path::{Path, PathBuf};

use mdbus::sys::affinity::{Device, Sysfs};
use mdbus::sys::map::Mapping;
use mdbus::sys::numa;

/// A sysfs root where `class/infiniband/NAME/device/numa_node` holds
/// `node`.
fn fake_sysfs(name: &str, node: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("mdbus-numa-{}-{name}", std::process::id()));
    let dev = root.join("class/infiniband").join(name).join("device");
    std::fs::create_dir_all(&dev).unwrap();
    std::fs::write(dev.join("numa_node"), format!("{node}\n")).unwrap();
    root
}

fn policy(map: &Mapping) -> Option<String> {
    numa::policy_of(Path::new("/proc/self/numa_maps"), map.as_ptr() as usize).unwrap()
}

#[test]
fn a_pool_is_preferred_on_the_devices_node_before_it_is_touched() {
    let root = fake_sysfs("fake0", "0");
    let sysfs = Sysfs::at(&root);
    // 3 pages plus one: a size no neighbouring mapping shares.
    let map = Mapping::anonymous(13 * 4096, false).unwrap();
    assert_eq!(numa::device_node(&sysfs, Device::Rdma("fake0")), Some(0));
    assert_eq!(numa::place(&map, &sysfs, Device::Rdma("fake0")), Some(0));
    // SAFETY: fresh anonymous memory, zero and seen by nobody.
    unsafe { map.touch_pages() };
    assert_eq!(policy(&map).as_deref(), Some("prefer:0"));
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn a_device_without_a_node_leaves_the_default_policy() {
    let root = fake_sysfs("fake1", "-1");
    let sysfs = Sysfs::at(&root);
    let map = Mapping::anonymous(17 * 4096, false).unwrap();
    assert_eq!(numa::place(&map, &sysfs, Device::Rdma("fake1")), None);
    // SAFETY: as above.
    unsafe { map.touch_pages() };
    // The mapping may have merged with a neighbour (then it has no line of
    // its own); either way no preference was set.
    let p = policy(&map);
    assert!(p.is_none() || p.as_deref() == Some("default"), "{p:?}");
    // A device sysfs does not know places nothing either.
    assert_eq!(numa::place(&map, &sysfs, Device::Rdma("absent")), None);
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn a_node_the_host_lacks_is_not_applied() {
    // No host this runs on has 1000 nodes: mbind refuses, placement is
    // skipped (logged), the memory stays usable.
    let root = fake_sysfs("fake2", "1000");
    let sysfs = Sysfs::at(&root);
    let map = Mapping::anonymous(19 * 4096, false).unwrap();
    assert_eq!(numa::place(&map, &sysfs, Device::Rdma("fake2")), None);
    assert!(numa::prefer(&map, 1000).is_err());
    std::fs::remove_dir_all(root).ok();
}
