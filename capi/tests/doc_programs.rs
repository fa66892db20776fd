//! The C and C++ programs of docs/EMBEDDING.md ("First programs"), copied
//! out of the page, compiled against the installed library through
//! pkg-config and run with the page's own configuration files (shared
//! memory and UDP multicast; only the UDP ports and the segment directory
//! made unique to this run): what a newcomer writes from the page and the
//! header works, and prints what the page says.

mod support;

use std::process::Command;

use support::{compile, compiler, install, pkg_config, root, run, scratch};

/// The fenced block after `<!-- doc-program: NAME -->` in docs/EMBEDDING.md.
fn doc_block(name: &str) -> String {
    let page = std::fs::read_to_string(root().join("docs/EMBEDDING.md")).expect("read the page");
    let marker = format!("<!-- doc-program: {name} -->");
    let at = page
        .find(&marker)
        .unwrap_or_else(|| panic!("docs/EMBEDDING.md has no {marker}"));
    let mut lines = page[at + marker.len()..].lines().skip(1);
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a code block"
    );
    let body: Vec<&str> = lines.take_while(|l| *l != "```").collect();
    body.join("\n") + "\n"
}

/// The page's configuration files, made unique to this run.
fn configs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let pid = std::process::id();
    let shm_dir = dir.join("segments");
    std::fs::create_dir_all(&shm_dir).unwrap();
    // A [shm] table may follow the page's tables: TOML does not order them.
    let shm = doc_block("shm.toml") + &format!("[shm]\ndir = \"{}\"\n", shm_dir.display());
    let port = 41_000 + (pid % 1000) * 4;
    let udp = doc_block("udp.toml")
        .replace(
            "239.255.1.1:40100",
            &format!("239.255.{}.7:{port}", 1 + pid % 250),
        )
        .replace("127.0.0.1:40101", &format!("127.0.0.1:{}", port + 1));
    assert!(
        udp.contains(&format!(":{port}")),
        "the page's UDP group moved"
    );
    [("shm.toml", shm), ("udp.toml", udp)]
        .into_iter()
        .map(|(n, text)| {
            let p = dir.join(n);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

#[test]
fn the_pages_c_and_cpp_programs_build_and_print_what_it_says() {
    let test = "the_pages_c_and_cpp_programs_build_and_print_what_it_says";
    let Some(cc) = compiler(test, "CC", "cc") else {
        return;
    };
    let Some(cxx) = compiler(test, "CXX", "c++") else {
        return;
    };
    let dir = scratch("doc-programs");
    let prefix = dir.join("prefix");
    install(&prefix);
    let flags = pkg_config(&prefix, "mdbus");
    let expected = doc_block("quickstart.out");
    assert!(
        expected.starts_with("message 1 AAPL 189.50\n"),
        "{expected}"
    );
    for (src, compiler) in [("quickstart.c", &cc), ("quickstart.cpp", &cxx)] {
        let path = dir.join(src);
        std::fs::write(&path, doc_block(src)).unwrap();
        let exe = dir.join(src.replace('.', "-"));
        compile(compiler, &path, &exe, &flags);
        for cfg in configs(&dir) {
            let out = run(Command::new(&exe).arg(&cfg));
            assert_eq!(out, expected, "{src} with {}", cfg.display());
        }
    }
}
