"""Page tokens are authenticated: only what this gateway issued, for this tenant and filter, reaches
Cassandra (a malformed paging state makes the driver drop its connection; schemathesis found it)."""

from __future__ import annotations

import pytest

from spotreel.services.gateway.pagetokens import BadToken, PageTokens


def test_round_trip_and_binding_to_tenant_and_filter():
    tokens = PageTokens("k1")
    t = tokens.issue("alpha", "queued", b"\x00\x04state")
    assert tokens.state("alpha", "queued", t) == b"\x00\x04state"
    assert tokens.issue("alpha", None, None) is None and tokens.state("alpha", None, None) is None
    for tenant, status in (("beta", "queued"), ("alpha", None), ("alpha", "running")):
        with pytest.raises(BadToken):
            tokens.state(tenant, status, t)


@pytest.mark.parametrize("forged", ["%5BFiltered%5D", "AAAA", "not base64!", "é", "A" * 40])
def test_forged_or_foreign_tokens_are_refused_locally(forged):
    with pytest.raises(BadToken):
        PageTokens("k1").state("alpha", None, forged)


def test_a_shared_key_lets_replicas_read_each_others_tokens_and_no_key_does_not():
    t = PageTokens("shared").issue("alpha", None, b"s")
    assert PageTokens("shared").state("alpha", None, t) == b"s"
    with pytest.raises(BadToken):
        PageTokens().state("alpha", None, PageTokens().issue("alpha", None, b"s"))
