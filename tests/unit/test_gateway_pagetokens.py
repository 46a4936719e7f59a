"""Page tokens are authenticated: only what this gateway issued, for this tenant and filter, reaches
Cassandra (a malformed paging state makes the driver drop its connection; schemathesis found it)."""

from __future__ import annotations

import pytest

from spotreel.services.gateway.public.pagetokens import TOKEN, BadToken, MalformedToken, PageTokens, refusal


def test_round_trip_and_binding_to_tenant_and_filter():
    tokens = PageTokens("k1")
    t = tokens.issue("alpha", "queued", b"\x00\x04state")
    assert tokens.state("alpha", "queued", t) == b"\x00\x04state"
    assert tokens.issue("alpha", None, None) is None and tokens.state("alpha", None, None) is None
    for tenant, status in (("beta", "queued"), ("alpha", None), ("alpha", "running")):
        with pytest.raises(BadToken):
            tokens.state(tenant, status, t)


@pytest.mark.parametrize("forged", ["%5BFiltered%5D", "AAAA", "not base64!", "é", "A" * 40, "A" * 41, ""])
def test_forged_or_foreign_tokens_are_refused_locally(forged):
    with pytest.raises(BadToken):
        PageTokens("k1").state("alpha", None, forged)


@pytest.mark.parametrize("state", [b"s", b"\x00\x04state", bytes(range(256)) * 3])
def test_every_issued_token_has_the_documented_form_and_the_form_alone_is_not_enough(state):
    """/openapi.json carries TOKEN as page_token's pattern: what does not match it is 422 (malformed, like
    any field); what matches it but does not verify is 409 stale_page_token, whoever made it."""
    token = PageTokens("k1").issue("alpha", None, state)
    assert TOKEN.fullmatch(token)
    with pytest.raises(MalformedToken):
        PageTokens("k1").state("alpha", None, token[:22])
    with pytest.raises(BadToken) as stale:
        PageTokens("k2").state("alpha", None, token)
    assert not isinstance(stale.value, MalformedToken)
    assert (refusal(stale.value).status, refusal(stale.value).code) == (409, "stale_page_token")
    assert refusal(MalformedToken("x")).status == 422
    assert refusal(ValueError("the driver refused the paging state")).status == 409


def test_a_shared_key_lets_replicas_read_each_others_tokens_and_no_key_does_not():
    t = PageTokens("shared").issue("alpha", None, b"s")
    assert PageTokens("shared").state("alpha", None, t) == b"s"
    with pytest.raises(BadToken):
        PageTokens().state("alpha", None, PageTokens().issue("alpha", None, b"s"))
