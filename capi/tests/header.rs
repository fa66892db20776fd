//! include/mdbus.h is what cbindgen generates from this crate: a change of
//! the C API that forgets the header fails here.

use std::path::PathBuf;

#[test]
fn checked_in_header_is_what_cbindgen_generates() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("capi/cbindgen.toml parses");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");
    let path = crate_dir.join("../include/mdbus.h");
    if std::env::var_os("MDBUS_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/mdbus.h");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/mdbus.h differs from what cbindgen generates from capi/; update it with:\n  \
         MDBUS_BLESS=1 cargo test -p mdbus-capi --test header"
    );
}
