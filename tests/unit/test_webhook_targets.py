"""The shared rule for where a webhook may go: what the gateway refuses at submit is exactly what the sender
refuses at delivery, for every URL that can be judged without DNS."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spotreel.services.webhooks.addresses import RefusedAddress, check_url
from spotreel.webhooks.targets import delivery_refusal, literal_address, url_refusal


class NoDns:
    """A resolver that must not be asked: every URL here names its address itself."""

    async def resolve(self, host, port=0, family=0):
        raise AssertionError(f"DNS asked for {host}")

    async def close(self):
        pass


def sender_refuses(url: str, allow_private: bool) -> bool:
    try:
        asyncio.run(check_url(url, allow_private, NoDns()))
    except RefusedAddress:
        return True
    return False


def _url(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int | None, scheme: str) -> str:
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"{scheme}://{host}{'' if port is None else f':{port}'}/hook"


@given(ip=st.ip_addresses(), port=st.none() | st.sampled_from([0, 22, 80, 443, 8080, 65535]),
       scheme=st.sampled_from(["http", "https"]), allow_private=st.booleans())
def test_the_sender_and_its_rule_agree_on_every_ip_literal(ip, port, scheme, allow_private):
    url = _url(ip, port, scheme)
    assert (delivery_refusal(url, allow_private) is not None) == sender_refuses(url, allow_private), url


@pytest.mark.parametrize("url", ["http://example.com:22/", "http://example.com:0/", "ftp://example.com/",
                                 "http://example.com:70000/", "http://[zz/", "mailto:a@example.com"])
def test_never_deliverable_whatever_the_setting(url):
    assert url_refusal(url, True) is not None and url_refusal(url, False) is not None
    assert sender_refuses(url, True)


@pytest.mark.parametrize("host,address", [("2130706433", "127.0.0.1"), ("0x7f.1", "127.0.0.1"),
                                          ("127.1", "127.0.0.1"), ("[::1]", "::1"), ("10.0.0.1", "10.0.0.1"),
                                          ("example.com", None), ("deadbeef", None)])
def test_literal_addresses_are_read_like_the_c_resolver_reads_them(host, address):
    assert literal_address(host) == address


@pytest.mark.parametrize("host", ["localhost", "LOCALHOST", "api.localhost", "localhost."])
def test_localhost_names_are_loopback_without_asking_dns(host):
    assert "loopback" in url_refusal(f"http://{host}:8080/h", False)
    assert url_refusal(f"http://{host}:8080/h", True) is None


def test_other_names_wait_for_delivery_time_dns():
    assert url_refusal("https://hooks.example.com/x", False) is None
