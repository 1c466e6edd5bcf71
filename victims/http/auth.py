"""Credentials the endpoint client sends (`victim.endpoint.auth`, `auth_env`, `probe_auth_env`):
each is a requests auth object set on every request, so nothing from the environment (a
~/.netrc entry) can replace it.

- `bearer` (`auth_env` / `{type: bearer, token_env}`): `Authorization: Bearer TOKEN` (header and
  scheme as `auth_header` / `auth_scheme` say);
- `header` (`{type: header, name, value_env}`): `NAME: VALUE`;
- `oauth2` (`{type: oauth2, token_url, client_id_env, client_secret_env, scope}`): an OAuth2
  client-credentials token, fetched before the first request, fetched again 60 s (or a tenth of
  its lifetime, if shorter) before it expires and once after a 401. Client secret and every token
  are registered with the scrubber: never shown.

Variables follow auth_env's rule (victims/http/endpoint.py `allowed_var`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from requests.auth import AuthBase

from victims.errors import BadInput
from victims.http.secrets import SECRETS, clip, valid_header_value

EARLY_S = 60.0  # renew a token this long before it expires (at most a tenth of its lifetime)


class HeaderCredential(AuthBase):
    """A fixed header on every request."""

    def __init__(self, name: str, value: str):
        self.name, self.value = name, value

    def header(self) -> str:
        return self.value

    def __call__(self, r: Any) -> Any:
        r.headers[self.name] = self.header()
        return r

    def renew(self) -> bool:
        """Fetch a fresh credential after a 401; False when there is none to fetch."""
        return False

    def describe(self) -> str:
        return f"header {self.name}"


class OAuth2Credential(HeaderCredential):
    """A client-credentials token from `token_url`, renewed before expiry and once on a 401."""

    def __init__(self, spec: Any, client_id: str, secret: str, post: Callable[..., Any],
                 clock: Callable[[], float] = time.monotonic):
        super().__init__("Authorization", "")
        self.spec, self.client_id, self.secret = spec, client_id, secret
        self._post, self._clock = post, clock
        self._token: str | None = None
        self._renew_at = 0.0
        self._renewed_after_401: str | None = None
        self._lock = threading.Lock()
        self.fetched = 0

    def _fetch(self) -> None:
        form = {"grant_type": "client_credentials", "client_id": self.client_id,
                "client_secret": self.secret}
        if self.spec.scope:
            form["scope"] = self.spec.scope
        url = self.spec.token_url
        try:
            status, body = self._post(url, form)
        except OSError as exc:
            raise BadInput(f"victim.endpoint.auth.token_url: no token from {clip(url, 120)} "
                           f"({type(exc).__name__})") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if status != 200 or not isinstance(token, str) or not token.strip():
            err = body.get("error") if isinstance(body, dict) else None
            said = f": {clip(str(err), 80)}" if err else ""
            raise BadInput(SECRETS.scrub(f"victim.endpoint.auth.token_url: {clip(url, 120)} gave no "
                                         f"access_token (HTTP {status}{said})"))
        SECRETS.add(token)
        if not valid_header_value(token):
            raise BadInput("victim.endpoint.auth: the OAuth2 token cannot be sent in an HTTP header")
        life = body.get("expires_in")
        life = float(life) if isinstance(life, int | float) and life > 0 else 3600.0
        self._token = token.strip()
        self._renew_at = self._clock() + life - min(EARLY_S, life / 10)
        self.fetched += 1

    def header(self) -> str:
        with self._lock:
            if self._token is None or self._clock() >= self._renew_at:
                self._fetch()
            return f"Bearer {self._token}"

    def renew(self) -> bool:
        with self._lock:
            if self._token is not None and self._renewed_after_401 == self._token:
                return False  # this token was fetched after a 401 already: the refusal stands
            self._fetch()
            self._renewed_after_401 = self._token
            return True

    def describe(self) -> str:
        return "oauth2 client credentials"


def token_post(session: Any, timeout_s: float) -> Callable[[str, dict], tuple[int, Any]]:
    """POST a form to the token URL with the endpoint's TLS settings; (status, JSON or None)."""
    def post(url: str, form: dict) -> tuple[int, Any]:
        resp = session.post(url, data=form, timeout=timeout_s, allow_redirects=False,
                            verify=session.verify, cert=session.cert,
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, None
    return post


def build_credential(spec: Any, token: str | None, read_var: Callable[[str, str], str],
                     session: Any) -> HeaderCredential | None:
    """The scenario's credential (None without one). `read_var(key, NAME)` reads an allowed,
    set variable (BadInput otherwise)."""
    auth = getattr(spec, "auth", None)
    if auth is None or auth.type == "bearer":
        if not token:
            return None
        value = f"{spec.auth_scheme} {token}" if spec.auth_scheme else token
        if not valid_header_value(value):
            raise BadInput(f"victim.endpoint.auth_env: the token in ${spec.auth_env} cannot be sent in an "
                           "HTTP header (control characters, a line break, non-ASCII or spaces at the "
                           "ends); value not shown")
        return HeaderCredential(spec.auth_header, value)
    if auth.type == "header":
        value = read_var("auth.value_env", auth.value_env)
        if not valid_header_value(value):
            raise BadInput(f"victim.endpoint.auth.value_env: the value of ${auth.value_env} cannot be sent "
                           "in an HTTP header; value not shown")
        return HeaderCredential(auth.name, value)
    client_id = read_var("auth.client_id_env", auth.client_id_env)
    secret = read_var("auth.client_secret_env", auth.client_secret_env)
    return OAuth2Credential(auth, client_id, secret, token_post(session, spec.timeout_s))
