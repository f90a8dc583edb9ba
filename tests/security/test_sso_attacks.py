"""Single sign-on as an attacker sees it (fast tier: the database, the views, a stand-in for the provider's half):
another origin of the same site using up a sign-in's ticket, the CORS answer to a credentialed read, the cookies'
attributes over http and behind an https proxy, a callback's query never reflected or audited, a userinfo answer
about someone else, a username that reads like an existing one, admin or allowed groups never matched after
normalisation, every check of the ID token on tokens signed here (algorithms, signature, leeway at the limit and
one past, aud/azp, iss, nonce, at_hash, key rotation, the discovery document's issuer, PKCE S256), and the
sign-out of an SSO session. The round trip against the real provider is tests/sso."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, OctKey, RSAKey
from rest_framework_simplejwt.tokens import RefreshToken

from accounts.models import AuditEvent
from accounts.tokens import SSO_CLAIM
from sso import views
from sso.models import Identity, LoginAttempt, SsoSession, Ticket
from sso.provider import Provider, SsoFailure
from tests.conftest import client_for
from tests.oidc.harness import sign_in as browser_sign_in
from tests.sso.conftest import SsoServer, browser, oidc_provider, sso_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db

User = get_user_model()
ISSUER = "https://idp.example.com"
BROWSER = "b" * 43
SESSION = "/api/auth/oidc/session"
CALLBACK = "/api/auth/oidc/callback"


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def ticket(user: Any) -> str:
    value = secrets.token_urlsafe(32)
    session = SsoSession.objects.create(key=secrets.token_urlsafe(24), user=user, issuer=ISSUER, id_token="x.y.z")
    Ticket.objects.create(hash=digest(value), user=user, session=session)
    return value


def collect(client: Any, value: str, **headers: str) -> Any:
    client.cookies[views.TICKET_COOKIE] = value
    return client.post(SESSION, **headers)


# --- the ticket and other origins --------------------------------------------------------------------------------

@pytest.mark.parametrize("origin", ["http://localhost:9999", "http://127.0.0.1:5173", "null",
                                    "http://testserver.attacker.example", "https://sub.testserver"])
def test_another_origin_cannot_use_up_a_sign_ins_ticket(anon_client, owner, origin):
    """SameSite=Lax sends the cookie from any origin of the same site (another port of localhost, a sibling
    subdomain): the ticket must be refused to them before it is looked at, and still be there for the dashboard."""
    value = ticket(owner)
    refused = collect(anon_client, value, HTTP_ORIGIN=origin)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert Ticket.objects.filter(hash=digest(value)).exists()
    answer = collect(anon_client, value, HTTP_ORIGIN="http://testserver")
    assert answer.status_code == 200 and answer.json()["user"]["username"] == owner.username


def test_a_request_without_an_origin_collects_as_before(anon_client, owner):
    assert collect(anon_client, ticket(owner)).status_code == 200


def test_behind_a_proxy_the_redirect_uris_origin_is_the_servers(anon_client, owner, settings):
    """The proxy may name the upstream as the Host; the browser's Origin is the public one of REDIRECT_URI."""
    settings.ALLOWED_HOSTS = ["127.0.0.1"]
    settings.OIDC = {**settings.OIDC, "REDIRECT_URI": "https://agentsite.example.com/api/auth/oidc/callback"}
    value = ticket(owner)
    assert collect(anon_client, value, HTTP_ORIGIN="https://evil.example.com", HTTP_HOST="127.0.0.1"
                   ).status_code == 403
    assert collect(anon_client, value, HTTP_ORIGIN="https://agentsite.example.com", HTTP_HOST="127.0.0.1"
                   ).status_code == 200


@pytest.mark.e2e
def test_through_serve_and_the_real_provider_another_origin_cannot_use_up_the_ticket(sso_server: SsoServer):  # noqa: F811
    """The Origin and Host a browser sends, as daphne hands them to the view (real HTTP on loopback)."""
    base = sso_server.base_url
    done = browser_sign_in(base, "origin-eve", http=browser(), collect=False)
    assert done.callback is not None and done.callback.status_code == 302, done.callback and done.callback.text
    for origin in ("http://localhost:9999", base.replace("127.0.0.1", "localhost"), "null"):
        foreign = done.http.post(f"{base}{SESSION}", headers={"Origin": origin}, timeout=10)
        assert foreign.status_code == 403 and foreign.json()["error"]["code"] == "forbidden", (origin, foreign.text)
        assert "Access-Control-Allow-Credentials" not in foreign.headers
    own = done.http.post(f"{base}{SESSION}", headers={"Origin": base}, timeout=10)
    assert own.status_code == 200 and own.json()["user"]["username"] == "origin-eve", own.text


def test_no_origin_is_allowed_a_credentialed_read_of_the_tokens(anon_client, owner):
    """CORS lets any localhost port read the API with a bearer token; a read carrying cookies is another thing:
    without Access-Control-Allow-Credentials no page of another origin reads what a cookie buys."""
    for origin in ("http://localhost:9999", "http://testserver"):
        preflight = anon_client.options(SESSION, HTTP_ORIGIN=origin, HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
        answer = collect(anon_client, ticket(owner), HTTP_ORIGIN=origin)
        for response in (preflight, answer):
            assert "Access-Control-Allow-Credentials" not in response, (origin, dict(response.headers))


# --- a stand-in for the provider's half, to drive the views ------------------------------------------------------

class FakeProvider:
    """What sso.provider.Provider answers, without a provider: the ID token's claims and userinfo as set."""

    issuer = ISSUER

    def __init__(self, claims: dict[str, Any], info: dict[str, Any] | None = None) -> None:
        self.claims, self.info = claims, info or {}

    def authorization_url(self, *, redirect_uri: str, state: str, nonce: str, code_verifier: str) -> str:
        return f"{ISSUER}/auth?state={state}"

    def exchange(self, *, code: str, redirect_uri: str, code_verifier: str) -> dict[str, Any]:
        if code != "good-code":
            raise SsoFailure("code_rejected", "Its token endpoint answered 'invalid_grant'.")
        return {"id_token": "header.payload.signature", "access_token": "AT-" + "s" * 40}

    def id_claims(self, id_token: str, *, nonce: str, access_token: str | None = None) -> dict[str, Any]:
        return dict(self.claims)

    def userinfo(self, access_token: str) -> dict[str, Any]:
        return dict(self.info)


@pytest.fixture
def fake(settings, monkeypatch):
    settings.OIDC = {**settings.OIDC, "ISSUER": ISSUER, "CLIENT_ID": "agentsite", "CREATE_USERS": True,
                     "ADMIN_GROUPS": [], "ALLOWED_GROUPS": [], "GROUPS_CLAIM": "groups"}

    def use(claims: dict[str, Any], info: dict[str, Any] | None = None) -> FakeProvider:
        stand_in = FakeProvider(claims, info)
        monkeypatch.setattr(views, "provider", lambda: stand_in)
        return stand_in

    return use


@pytest.mark.parametrize(("redirect_uri", "secure"), [("", False),
                                                      ("https://agentsite.example.com/api/auth/oidc/callback", True)])
def test_the_cookies_are_http_only_lax_narrow_and_secure_behind_https(anon_client, fake, settings, redirect_uri,
                                                                      secure):
    settings.OIDC = {**settings.OIDC, "REDIRECT_URI": redirect_uri}
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"})
    started = anon_client.get("/api/auth/oidc/login")
    assert started.status_code == 302 and started["Cache-Control"] == "no-store"
    bound = started.cookies[views.BROWSER_COOKIE]
    assert (bound["httponly"], bound["samesite"], bound["path"], bool(bound["secure"])) == (
        True, "Lax", "/api/auth/oidc/", secure)
    state = started["Location"].split("state=")[1]
    finished = anon_client.get(CALLBACK, {"state": state, "code": "good-code"})
    assert finished.status_code == 302 and finished["Location"] == "/#/sso"
    handed = finished.cookies[views.TICKET_COOKIE]
    assert (handed["httponly"], handed["samesite"], handed["path"], bool(handed["secure"])) == (
        True, "Lax", "/api/auth/oidc/session", secure)
    assert int(handed["max-age"]) == 60


def test_a_short_or_missing_browser_cookie_is_replaced_and_a_long_one_kept(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n"})
    anon_client.cookies[views.BROWSER_COOKIE] = "x" * 31  # guessable: never the binding
    first = anon_client.get("/api/auth/oidc/login").cookies[views.BROWSER_COOKIE].value
    assert len(first) >= 32 and first != "x" * 31
    second = anon_client.get("/api/auth/oidc/login").cookies[views.BROWSER_COOKIE].value
    assert second == first  # two tabs signing in at once both finish
    assert LoginAttempt.objects.filter(browser=digest(first)).count() == 2


def start(client: Any) -> str:
    return client.get("/api/auth/oidc/login")["Location"].split("state=")[1]


def test_a_callback_in_another_browser_is_refused_and_uses_the_state_up(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"})
    state = start(anon_client)
    attacker = client_for()
    attacker.cookies[views.BROWSER_COOKIE] = BROWSER
    answer = attacker.get(CALLBACK, {"state": state, "code": "good-code"})
    assert answer.status_code == 400 and b'<code id="reason">browser_mismatch</code>' in answer.content
    assert not User.objects.filter(username="alice").exists() and not LoginAttempt.objects.exists()
    again = anon_client.get(CALLBACK, {"state": state, "code": "good-code"})
    assert b'<code id="reason">state_invalid</code>' in again.content


def test_the_callbacks_query_is_never_on_the_page_or_in_the_audit(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n"})
    code = "CODE-" + secrets.token_urlsafe(24)
    for params in ({"state": "forged-" + secrets.token_urlsafe(8), "code": code},
                   {"state": start(anon_client), "code": code}):  # a state that holds, a code the provider refuses
        answer = anon_client.get(CALLBACK, params)
        assert answer.status_code == 400 and answer["Cache-Control"] == "no-store"
        assert code not in answer.content.decode() and params["state"] not in answer.content.decode()
    events = AuditEvent.objects.filter(action="auth.sso_failed")
    assert {event.details["reason"] for event in events} == {"state_invalid", "code_rejected"}
    assert all(code not in str(event.details) for event in events)


def test_a_userinfo_answer_about_another_subject_is_refused_and_changes_nothing(anon_client, fake):
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice"},
         {"sub": "s-2", "email": "victim@example.com", "email_verified": True, "groups": ["root"]})
    answer = anon_client.get(CALLBACK, {"state": start(anon_client), "code": "good-code"})
    assert answer.status_code == 502 and b'<code id="reason">provider_invalid</code>' in answer.content
    assert not User.objects.filter(username="alice").exists() and not Identity.objects.exists()
    assert not Ticket.objects.exists() and not SsoSession.objects.exists()


def test_the_id_tokens_claims_win_over_userinfos(anon_client, fake, settings):
    settings.OIDC = {**settings.OIDC, "ADMIN_GROUPS": ["root"]}
    fake({"sub": "s-1", "nonce": "n", "preferred_username": "alice", "groups": ["eng"]},
         {"sub": "s-1", "preferred_username": "root", "groups": ["root"]})
    answer = anon_client.get(CALLBACK, {"state": start(anon_client), "code": "good-code"})
    assert answer.status_code == 302
    user = User.objects.get(sso_identities__subject="s-1")
    assert user.username == "alice" and not user.is_staff and not user.is_superuser


# --- names that read like others ---------------------------------------------------------------------------------

def test_a_username_that_reads_like_an_existing_one_is_made_unique_against_it(fake, django_user_model):
    from sso.accounts import sign_in

    django_user_model.objects.create_user(username="admin", password="x" * 12)
    user, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "preferred_username": "\uff41dmin"})  # fullwidth a
    assert user.username == "admin-2"
    ligature, _ = sign_in(issuer=ISSUER, claims={"sub": "s-2", "preferred_username": "o\ufb03ce"})  # "ffi"
    assert ligature.username == "office"


@pytest.mark.parametrize("sent", ["ops_admins", "ops.admins", "/ops admins", "OPS ADMINS", "ops  admins"])
def test_admin_and_allowed_groups_are_never_matched_after_normalisation(fake, settings, sent):
    """A claim value that would become the same group name here is not the configured group."""
    from sso.accounts import sign_in

    settings.OIDC = {**settings.OIDC, "ADMIN_GROUPS": ["ops admins"], "ALLOWED_GROUPS": ["ops admins", "staff"]}
    with pytest.raises(SsoFailure) as caught:
        sign_in(issuer=ISSUER, claims={"sub": "s-1", "groups": [sent]})
    assert caught.value.reason == "not_allowed"
    user, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "groups": [sent, "staff"]})
    assert not user.is_staff and not user.is_superuser


# --- the ID token's checks, on tokens signed here (no provider process) ------------------------------------------

ID_CONFIG = {"ISSUER": "https://idp.example.com", "CLIENT_ID": "agentsite", "CLIENT_SECRET": "s",
             "SCOPES": ["profile", "email"], "DISCOVERY_TTL_S": 3600, "TIMEOUT_S": 1}
DISCOVERY = {"issuer": "https://idp.example.com", "jwks_uri": "https://idp.example.com/jwks",
             "authorization_endpoint": "https://idp.example.com/auth", "token_endpoint": "https://idp.example.com/token"}


@pytest.fixture(scope="module")
def keys() -> dict[str, Any]:
    return {"RS256": RSAKey.generate_key(2048, parameters={"kid": "rsa-1"}),
            "ES256": ECKey.generate_key("P-256", parameters={"kid": "ec-1"}),
            "rotated": RSAKey.generate_key(2048, parameters={"kid": "rsa-2"}),
            "unpublished": RSAKey.generate_key(2048, parameters={"kid": "rsa-9"})}


class Fetches:
    """The provider's GETs, answered from here: the discovery document and each key set in turn."""

    def __init__(self, discovery: dict[str, Any], *key_sets: dict[str, Any]) -> None:
        self.discovery, self.key_sets, self.urls = discovery, list(key_sets), []

    def __call__(self, url: str, what: str, **_: Any) -> dict[str, Any]:
        self.urls.append(url)
        if url.endswith("/.well-known/openid-configuration"):
            return dict(self.discovery)
        return self.key_sets.pop(0) if len(self.key_sets) > 1 else self.key_sets[0]


def published(*keys: Any) -> dict[str, Any]:
    return KeySet(list(keys)).as_dict(private=False)


def relying_party(monkeypatch, fetches: Fetches) -> Provider:
    provider = Provider(ID_CONFIG)
    monkeypatch.setattr(provider, "_get_json", fetches)
    return provider


def signed(key: Any, alg: str = "RS256", **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": ID_CONFIG["ISSUER"], "sub": "s-1", "aud": "agentsite", "iat": now, "exp": now + 300,
              "nonce": "n-1", **changes}
    return jwt.encode({"alg": alg, "kid": key.kid}, {k: v for k, v in claims.items() if v is not None}, key)


def reason(provider: Provider, token: str, access_token: str | None = None) -> str:
    with pytest.raises(SsoFailure) as caught:
        provider.id_claims(token, nonce="n-1", access_token=access_token)
    return caught.value.reason


@pytest.fixture
def rp(monkeypatch, keys) -> Provider:
    return relying_party(monkeypatch, Fetches(DISCOVERY, published(keys["RS256"], keys["ES256"])))


@pytest.mark.parametrize("alg", ["RS256", "ES256"])
def test_a_good_id_token_of_either_algorithm_is_accepted(rp, keys, alg):
    assert rp.id_claims(signed(keys[alg], alg), nonce="n-1")["sub"] == "s-1"


def test_a_token_signed_with_a_shared_secret_or_none_is_refused(rp, keys):
    secret = OctKey.import_key("s" * 32, {"kid": "rsa-1"})
    assert reason(rp, jwt.encode({"alg": "HS256", "kid": "rsa-1"}, {"sub": "s-1"}, secret,
                                 algorithms=["HS256"])) == "wrong_algorithm"
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "kid": "rsa-1"}).encode()).rstrip(b"=").decode()
    body = signed(keys["RS256"]).split(".")[1]
    assert reason(rp, f"{header}.{body}.") == "wrong_algorithm"


def test_a_changed_payload_breaks_the_signature(rp, keys):
    head, _, sig = signed(keys["RS256"]).split(".")
    other = signed(keys["RS256"], sub="admin").split(".")[1]
    assert reason(rp, f"{head}.{other}.{sig}") == "bad_signature"


@pytest.mark.parametrize(("exp_ago", "outcome"), [(59, None), (61, "expired")])
def test_an_expired_token_has_sixty_seconds_of_leeway_and_not_one_more(rp, keys, exp_ago, outcome):
    now = int(time.time())
    token = signed(keys["RS256"], iat=now - 600, exp=now - exp_ago)
    if outcome is None:
        assert rp.id_claims(token, nonce="n-1")["sub"] == "s-1"
    else:
        assert reason(rp, token) == outcome


@pytest.mark.parametrize(("iat_ahead", "outcome"), [(55, None), (65, "not_yet_valid")])
def test_a_token_from_the_future_has_sixty_seconds_of_leeway(rp, keys, iat_ahead, outcome):
    token = signed(keys["RS256"], iat=int(time.time()) + iat_ahead)
    if outcome is None:
        assert rp.id_claims(token, nonce="n-1")["sub"] == "s-1"
    else:
        assert reason(rp, token) == outcome


@pytest.mark.parametrize(("changes", "outcome"), [
    ({"aud": "another-app"}, "wrong_audience"),
    ({"aud": ["another-app"]}, "wrong_audience"),
    ({"aud": None}, "missing_claim"),
    ({"aud": ["agentsite", "another-app"], "azp": "another-app"}, "wrong_audience"),
    ({"aud": ["agentsite", "another-app"]}, "missing_claim"),  # several audiences: azp must name this client
    ({"iss": "https://idp.example.com/other"}, "wrong_issuer"),
    ({"iss": None}, "missing_claim"),
    ({"nonce": "n-2"}, "nonce_mismatch"),
    ({"nonce": None}, "nonce_mismatch"),
    ({"nonce": ""}, "nonce_mismatch"),
    ({"exp": None}, "missing_claim")])
def test_each_claim_that_binds_the_token_is_checked(rp, keys, changes, outcome):
    assert reason(rp, signed(keys["RS256"], **changes)) == outcome


def test_azp_naming_this_client_with_several_audiences_is_accepted(rp, keys):
    token = signed(keys["RS256"], aud=["agentsite", "another-app"], azp="agentsite")
    assert rp.id_claims(token, nonce="n-1")["sub"] == "s-1"


def test_an_at_hash_for_another_access_token_is_refused(rp, keys):
    access = "access-" + "a" * 40
    half = hashlib.sha256(access.encode()).digest()[:16]
    at_hash = base64.urlsafe_b64encode(half).rstrip(b"=").decode()
    token = signed(keys["RS256"], at_hash=at_hash)
    assert rp.id_claims(token, nonce="n-1", access_token=access)["sub"] == "s-1"
    assert reason(rp, token, access_token=access + "x") == "invalid_token"


def test_an_unknown_key_id_fetches_the_key_set_once_more_and_no_more(monkeypatch, keys):
    fetches = Fetches(DISCOVERY, published(keys["RS256"]), published(keys["RS256"], keys["rotated"]))
    provider = relying_party(monkeypatch, fetches)
    assert provider.id_claims(signed(keys["RS256"]), nonce="n-1")["sub"] == "s-1"
    assert provider.id_claims(signed(keys["rotated"]), nonce="n-1")["sub"] == "s-1"  # the provider rotated
    assert fetches.urls.count(DISCOVERY["jwks_uri"]) == 2
    assert reason(provider, signed(keys["unpublished"])) == "unknown_key"
    assert fetches.urls.count(DISCOVERY["jwks_uri"]) == 3  # one more try, then refused


def test_a_discovery_document_naming_another_issuer_is_refused(monkeypatch, keys):
    fetches = Fetches({**DISCOVERY, "issuer": "https://attacker.example.com"}, published(keys["RS256"]))
    with pytest.raises(SsoFailure) as caught:
        relying_party(monkeypatch, fetches).metadata()
    assert caught.value.reason == "provider_invalid" and caught.value.status == 502


def test_the_authorization_url_asks_for_openid_with_pkce_s256_state_and_nonce(rp):
    verifier = secrets.token_urlsafe(48)
    url = rp.authorization_url(redirect_uri="https://agentsite.example.com/api/auth/oidc/callback", state="st-1",
                               nonce="n-1", code_verifier=verifier)
    query = parse_qs(urlsplit(url).query)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"] == [challenge]
    assert query["state"] == ["st-1"] and query["nonce"] == ["n-1"] and query["response_type"] == ["code"]
    assert query["scope"][0].split()[0] == "openid" and verifier not in url


# --- the session's tokens and its sign-out -----------------------------------------------------------------------

def test_the_collected_refresh_token_names_the_sso_session_and_only_its_user_ends_it(anon_client, owner, other_user,
                                                                                      fake, monkeypatch):
    value = ticket(owner)
    session = SsoSession.objects.get()
    pair = collect(anon_client, value).json()
    assert RefreshToken(pair["refresh"])[SSO_CLAIM] == session.key
    stand_in = fake({"sub": "s-1"})
    monkeypatch.setattr(stand_in, "end_session_url", lambda *, id_token, post_logout_redirect_uri, **_:
                        f"{ISSUER}/end?id_token_hint={id_token}&post_logout_redirect_uri={post_logout_redirect_uri}",
                        raising=False)
    # Another user posting this session's refresh token ends nothing of it.
    stranger = client_for(other_user).post("/api/auth/oidc/logout", {"refresh": pair["refresh"]}, format="json")
    assert stranger.status_code == 400 and stranger.json()["error"]["code"] == "invalid"
    assert SsoSession.objects.filter(pk=session.pk).exists()
    mine = client_for(owner).post("/api/auth/oidc/logout", {"refresh": pair["refresh"]}, format="json")
    assert mine.status_code == 200, mine.content
    assert mine.json()["end_session_url"] == (f"{ISSUER}/end?id_token_hint=x.y.z"
                                              "&post_logout_redirect_uri=http://testserver/")
    assert not SsoSession.objects.filter(pk=session.pk).exists()


def test_a_session_of_another_issuer_is_not_sent_to_this_providers_sign_out(anon_client, owner, fake, monkeypatch):
    value = ticket(owner)
    SsoSession.objects.update(issuer="https://previous-idp.example.com")
    pair = collect(anon_client, value).json()
    stand_in = fake({"sub": "s-1"})
    monkeypatch.setattr(stand_in, "end_session_url", lambda **_: f"{ISSUER}/end", raising=False)
    answer = client_for(owner).post("/api/auth/oidc/logout", {"refresh": pair["refresh"]}, format="json")
    assert answer.status_code == 200 and answer.json()["end_session_url"] is None  # no id_token_hint to a stranger


def test_the_failure_page_runs_no_script_and_is_not_framed(anon_client):
    answer = anon_client.get(CALLBACK, {"state": "forged", "code": "c"})
    policy = answer["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy and "script-src" not in policy
    assert answer["Content-Type"].startswith("text/html") and answer["Cache-Control"] == "no-store"


@pytest.mark.parametrize(("staff", "superuser"), [(False, True), (True, False)])
def test_admin_groups_take_away_either_half_of_admin(fake, settings, django_user_model, staff, superuser):
    """A superuser who is not staff (or the other way round), made so by hand, is not an admin of the groups."""
    from sso.accounts import sign_in

    settings.OIDC = {**settings.OIDC, "ADMIN_GROUPS": ["root"]}
    user, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "preferred_username": "alice", "groups": ["root"]})
    django_user_model.objects.filter(pk=user.pk).update(is_staff=staff, is_superuser=superuser)
    user, changes = sign_in(issuer=ISSUER, claims={"sub": "s-1", "groups": ["eng"]})
    user.refresh_from_db()
    assert (user.is_staff, user.is_superuser, changes["admin"]) == (False, False, False)


# --- how long an SSO session lasts -------------------------------------------------------------------------------

@pytest.mark.parametrize("ended", ["signed out elsewhere", "signed in longer ago than the refresh lifetime"])
def test_an_sso_sessions_refresh_tokens_end_with_the_session(anon_client, owner, settings, ended):
    pair = collect(anon_client, ticket(owner)).json()
    if ended == "signed out elsewhere":
        SsoSession.objects.all().delete()
    else:
        lifetime = settings.SIMPLE_JWT["REFRESH_TOKEN_LIFETIME"]
        SsoSession.objects.update(created_at=SsoSession.objects.get().created_at - lifetime - timedelta(seconds=1))
    answer = anon_client.post("/api/auth/refresh", {"refresh": pair["refresh"]}, format="json")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "token_invalid"


def test_an_sso_session_within_its_lifetime_refreshes(anon_client, owner, settings):
    pair = collect(anon_client, ticket(owner)).json()
    lifetime = settings.SIMPLE_JWT["REFRESH_TOKEN_LIFETIME"]
    SsoSession.objects.update(created_at=SsoSession.objects.get().created_at - lifetime + timedelta(seconds=30))
    answer = anon_client.post("/api/auth/refresh", {"refresh": pair["refresh"]}, format="json")
    assert answer.status_code == 200, answer.content
    assert RefreshToken(answer.json()["refresh"])[SSO_CLAIM] == SsoSession.objects.get().key


# --- group names from the claim ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("owners", "other"), [("eng team", "eng.team"), ("/parent/child", "parent_child"),
                                               ("x" * 64 + "-finance", "x" * 64 + "-interns")])
def test_two_provider_groups_never_share_one_group_here(fake, settings, owners, other):
    from organisation.models import Membership
    from sso.accounts import sign_in

    settings.OIDC = {**settings.OIDC, "CREATE_GROUPS": True}
    member, _ = sign_in(issuer=ISSUER, claims={"sub": "s-1", "preferred_username": "alice",
                                               "groups": [owners, "everyone"]})
    outsider, _ = sign_in(issuer=ISSUER, claims={"sub": "s-2", "preferred_username": "mallory",
                                                 "groups": [other, "everyone"]})
    mine = set(Membership.objects.filter(user=member).values_list("group__name", flat=True))
    theirs = set(Membership.objects.filter(user=outsider).values_list("group__name", flat=True))
    assert "everyone" in mine & theirs  # a plain name still syncs: the test is about the others
    assert mine & theirs == {"everyone"}
