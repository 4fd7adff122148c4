"""Tinker's JWT exchange on the Tinker-compatible server: tokens minted and checked by hand, the
real client trading its key and reading ``whoami`` from the token, a refused token answered so
that the client fetches a new one, tokens that outlive a restart, and ``jwt_auth`` off."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from integrations.tinker._auth import Tokens, key_user, looks_like_jwt

tinker = pytest.importorskip("tinker", reason="the tinker client is not installed (the `tinker` extra)")

from integrations.tinker import TinkerServer, TinkerServerConfig  # noqa: E402


def test_tokens_by_hand(tmp_path):
    tokens = Tokens(b"k" * 32, org_id="lab", ttl_s=60)
    token = tokens.mint("tml:organization_user:ada", now=1000)
    assert looks_like_jwt(token) and not looks_like_jwt("tml-key")
    claims, why = tokens.check(token, now=1059)
    assert why == "" and claims["sub"] == "tml:organization_user:ada" and claims["org_id"] == "lab"
    assert claims["email"] == "ada@skyrl.invalid"
    assert claims["exp"] - claims["iat"] == 60
    assert tokens.check(token, now=1060) == (None, "the token has expired")
    head, body, sig = token.split(".")
    assert (
        tokens.check(f"{head}.{body}.{sig[:-2]}AA", now=1000)[1]
        == "the token's signature is not this server's"
    )
    other = Tokens(b"o" * 32, org_id="lab").mint("tml:organization_user:ada", now=1000)
    assert tokens.check(other, now=1000)[1] == "the token's signature is not this server's"
    assert tokens.check("eyJ.not.json", now=1000)[1] == "the token is not a JWT"
    # one identity per key, never the key itself; any key is "local" where keys are not checked
    assert key_user("tml-secret", True).startswith("tml:organization_user:key-")
    assert "secret" not in key_user("tml-secret", True)
    assert key_user("tml-secret", False) == "tml:organization_user:local"
    # a durable server keeps its secret: tokens outlive a restart
    a = Tokens.for_server(str(tmp_path), "lab")
    assert Tokens.for_server(str(tmp_path), "lab").check(a.mint("tml:organization_user:x"))[1] == ""
    assert stat.S_IMODE(os.stat(tmp_path / "auth.key").st_mode) == 0o600


@pytest.mark.slow
def test_the_client_trades_its_key_and_whoami_reads_the_token(tmp_path):
    config = TinkerServerConfig(checkpoint_dir=str(tmp_path), api_keys=("tml-a",))
    with TinkerServer(config) as server:
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-a")
        me = client.create_rest_client().whoami().result()
        assert me.user_urn == key_user("tml-a", True) and me.org_urn == "tml:organization:local"
        assert me.email and me.user_urn.startswith("tml:organization_user:")  # as Tinker's e2e asks
        run = client.create_lora_training_client("tiny-random", rank=4).model_id
        owner = client.create_rest_client().get_training_run(run).result().model_owner
        assert owner.startswith("tml:organization_user:")
        client.create_rest_client().list_training_runs().result()  # requests go with the token
        routes = {(m, r) for m, r, code in server.state.requests if code < 400}
        assert ("POST", "/api/v1/auth/token") in routes
        token = server.state.tokens.mint(key_user("tml-a", True))
        ok = httpx.get(f"{server.url}/api/v1/training_runs", headers={"X-API-Key": token})
        assert ok.status_code == 200
        # an expired or foreign token: 401 telling the client to trade its key again
        stale = server.state.tokens.mint(key_user("tml-a", True), now=0)
        for bad in (stale, Tokens(b"x" * 32, "local").mint(key_user("tml-a", True))):
            r = httpx.get(f"{server.url}/api/v1/training_runs", headers={"X-API-Key": bad})
            assert r.status_code == 401 and 'error="invalid_token"' in r.headers["WWW-Authenticate"]
        # a token for a key the server does not accept (another key list) is refused too
        other = server.state.tokens.mint(key_user("tml-gone", True))
        assert (
            httpx.get(f"{server.url}/api/v1/training_runs", headers={"X-API-Key": other}).status_code == 401
        )
        assert (
            httpx.post(f"{server.url}/api/v1/auth/token", headers={"X-API-Key": "tml-b"}).status_code == 401
        )
        client.holder.close()
    # a restarted server on the same directory accepts the tokens the first one issued
    with TinkerServer(config) as again:
        r = httpx.get(f"{again.url}/api/v1/training_runs", headers={"X-API-Key": token})
        assert r.status_code == 200


@pytest.mark.slow
def test_jwt_off_sends_the_key_itself(tmp_path):
    with TinkerServer(TinkerServerConfig(checkpoint_dir=str(tmp_path), jwt_auth=False)) as server:
        assert httpx.post(f"{server.url}/api/v1/client/config", json={}).json()["pjwt_auth_enabled"] is False
        assert (
            httpx.post(f"{server.url}/api/v1/auth/token", headers={"X-API-Key": "tml-a"}).status_code == 404
        )
        client = tinker.ServiceClient(base_url=server.url, api_key="tml-a")
        with pytest.raises(RuntimeError, match="whoami requires JWT auth"):
            client.create_rest_client().whoami().result()
