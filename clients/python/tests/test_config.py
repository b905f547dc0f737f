"""lockd.config reads lockctl's config file, as lockd's dev server writes it."""

from __future__ import annotations

import os

import pytest

from lockd import config, errors

# What sigs.k8s.io/yaml writes for lockd's dev server (internal/lockd).
DEV = """# lockctl configuration for the lockd development server, written once by lockd.
# lockd never overwrites this file; delete it to have it written again.
contexts:
- ca: pki/ca.crt
  cert: pki/dev.crt
  key: pki/dev.key
  name: dev
  server: 127.0.0.1:7420
- ca: /abs/ca.crt
  cert: /abs/w1.crt
  key: '/abs/w1.key'
  name: dev-worker1
  server: "127.0.0.1:7420"
- insecure-identity: spiffe://test.local/alice
  name: test
  server: 127.0.0.1:9
current-context: dev
"""


def test_reads_the_contexts_lockd_writes_with_paths_relative_to_the_file(tmp_path):
    path = tmp_path / "lockctl.yaml"
    path.write_text(DEV)
    cfg = config.load(str(path))
    dev = cfg.context()
    assert dev.name == "dev" and dev.server == "127.0.0.1:7420"
    assert dev.ca == os.path.join(str(tmp_path), "pki/ca.crt")
    w1 = cfg.context("dev-worker1")
    assert (w1.server, w1.key) == ("127.0.0.1:7420", "/abs/w1.key")
    assert cfg.context("test").insecure_identity == "spiffe://test.local/alice"


def test_a_missing_context_is_named():
    with pytest.raises(errors.ConfigError, match="no context 'nope'"):
        config.parse(DEV).context("nope")


@pytest.mark.parametrize("text", [
    "contexts: [{name: a}]\n",            # flow style: not what lockd writes
    "contexts:\n- name: a\n  bogus: 1\n",  # an unknown field
    "contexts:\n- name: a\n    server: x\n",  # indented as a nested value
    "current-context: \"dev\n",
])
def test_refuses_what_it_cannot_read_rather_than_guess(text):
    with pytest.raises(errors.ConfigError, match="line"):
        config.parse(text)


def test_a_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(errors.ConfigError, match="nothere"):
        config.load(str(tmp_path / "nothere.yaml"))
