"""The Rust binaries the tests run as the other process, found the one way
every test file uses: an environment variable, else the release build of
this checkout. A missing binary skips the test, except under CI=true,
where it fails."""

import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# name -> (environment variable, path under target/, the command that builds it)
KNOWN = {
    "relay": ("MDBUS_RELAY", "release/mdbus-relay", "cargo build --release -p mdbus-relay"),
    "replay": ("MDBUS_REPLAY", "release/mdbus-replay", "cargo build --release -p mdbus-replay"),
    "peer": ("MDBUS_PEER", "release/examples/peer", "cargo build --release -p mdbus-capi --example peer"),
}


def binary(name):
    var, rel, build = KNOWN[name]
    path = os.environ.get(var) or os.path.join(ROOT, "target", rel)
    if not os.access(path, os.X_OK):
        why = f"{path} is missing: {build} (or set {var})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    return path
