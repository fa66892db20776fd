//! `mdbus-exchange --version` names the git revision and the RDMA devices
//! (or why there are none), like every tool's.

#[test]
fn version_names_the_revision_and_rdma() {
    let path = env!("CARGO_BIN_EXE_mdbus-exchange");
    let version = env!("CARGO_PKG_VERSION");
    let checked = mdbus_tool_support::version::check_program(path, "mdbus-exchange", version);
    assert_eq!(checked, Ok(()));
}
