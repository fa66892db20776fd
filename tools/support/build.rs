//! Records the git revision the tools are built from, for `--version`:
//! `git rev-parse --short HEAD` when git and the repository are there,
//! "unknown" otherwise (a source tarball builds all the same).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let rev = git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MDBUS_GIT_REVISION={rev}");
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it
    // names (a commit) and packed-refs (a gc). `--git-path` finds them in
    // a worktree too. Only existing files: a missing one would rebuild
    // every time.
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watch.push(r);
    }
    for name in watch {
        // --path-format needs git 2.31; older ones print a path relative
        // to this directory, which cargo reads the same way.
        let path = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            .or_else(|| git(&["rev-parse", "--git-path", &name]));
        if let Some(path) = path {
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
}
