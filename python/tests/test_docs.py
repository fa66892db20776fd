"""The Python script of docs/EMBEDDING.md, copied out of the page and run
with the page's own configuration files (shared memory and UDP multicast;
only the UDP ports and the segment directory made unique to this run): it
prints what the page says the C program prints."""

import os
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def doc_block(name):
    with open(os.path.join(ROOT, "docs", "EMBEDDING.md")) as f:
        lines = f.read().split("\n")
    marker = f"<!-- doc-program: {name} -->"
    at = lines.index(marker)
    assert lines[at + 1].startswith("```"), marker
    end = lines.index("```", at + 2)
    return "\n".join(lines[at + 2 : end]) + "\n"


@pytest.mark.parametrize("transport", ["shm", "udp"])
def test_the_pages_script_prints_what_the_page_says(transport):
    d = tempfile.mkdtemp(prefix="mdbus-py-doc-")
    cfg = doc_block(f"{transport}.toml")
    if transport == "shm":
        cfg += f'[shm]\ndir = "{d}"\n'
    else:
        pid = os.getpid()
        port = 45000 + (pid % 1000) * 4
        group = f"239.255.{pid % 250 + 1}.9:{port}"
        cfg = cfg.replace("239.255.1.1:40100", group).replace("127.0.0.1:40101", f"127.0.0.1:{port + 1}")
        assert group in cfg, "the page's UDP group moved"
    path = os.path.join(d, f"{transport}.toml")
    with open(path, "w") as f:
        f.write(cfg)
    script = os.path.join(d, "quickstart.py")
    with open(script, "w") as f:
        f.write(doc_block("quickstart.py"))
    out = subprocess.run([sys.executable, script, path], stdout=subprocess.PIPE, text=True, timeout=120, check=True)
    assert out.stdout == doc_block("quickstart.out")
