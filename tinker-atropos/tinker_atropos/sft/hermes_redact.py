"""Hermes' secret redaction, as `hermes sessions export --redact` applies it, without hermes-agent.

The trainer's runtime does not install hermes-agent, so its rules are reimplemented here from
hermes-agent 0.19.0's `agent/redact.py` (MIT): `redact_session_data` runs every string of a
session's `messages` through `redact_sensitive_text(text, force=True)`, whose passes run in this
order, each gated as Hermes gates it (the gates on `://` are part of the rules, not speed):

known key prefixes (sk-, ghp_, AKIA, hf_, ...) -> `KEY=value` where KEY names a secret -> dotted and
line-start config keys (no `://` in the text) -> JSON fields ("password": "...") -> YAML keys (no
`://`) -> Authorization headers -> x-api-key-style headers -> Telegram bot tokens -> private key
blocks -> database URL passwords -> bare-token URL userinfo -> JWTs -> a whole-text form body ->
E.164 phone numbers.

A value of 18 characters or more keeps its first 6 and last 4 (`sk-pro...7890`), a shorter one
becomes `***`. `tests/test_hermes_sessions.py` holds these rules to Hermes' own function on the
same strings. A redactor counts the texts it changed (one string of a message: its content, a call's
arguments), the number a preview reports: two passes may mask one secret, so secrets are not counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

HERMES_VERSION = "0.19.0"  # the release whose rules these are

_PREFIXES = [
    r"sk-[A-Za-z0-9_-]{10,}",
    r"ghp_[A-Za-z0-9]{10,}",
    r"github_pat_[A-Za-z0-9_]{10,}",
    r"gho_[A-Za-z0-9]{10,}",
    r"ghu_[A-Za-z0-9]{10,}",
    r"ghs_[A-Za-z0-9]{10,}",
    r"ghr_[A-Za-z0-9]{10,}",
    r"xapp-\d+-[A-Za-z0-9-]{10,}",
    r"xox[baprs]-[A-Za-z0-9-]{10,}",
    r"AIza[A-Za-z0-9_-]{30,}",
    r"pplx-[A-Za-z0-9]{10,}",
    r"fal_[A-Za-z0-9_-]{10,}",
    r"fc-[A-Za-z0-9]{10,}",
    r"bb_live_[A-Za-z0-9_-]{10,}",
    r"gAAAA[A-Za-z0-9_=-]{20,}",
    r"AKIA[A-Z0-9]{16}",
    r"sk_live_[A-Za-z0-9]{10,}",
    r"sk_test_[A-Za-z0-9]{10,}",
    r"rk_live_[A-Za-z0-9]{10,}",
    r"SG\.[A-Za-z0-9_-]{10,}",
    r"hf_[A-Za-z0-9]{10,}",
    r"r8_[A-Za-z0-9]{10,}",
    r"npm_[A-Za-z0-9]{10,}",
    r"pypi-[A-Za-z0-9_-]{10,}",
    r"dop_v1_[A-Za-z0-9]{10,}",
    r"doo_v1_[A-Za-z0-9]{10,}",
    r"am_[A-Za-z0-9_-]{10,}",
    r"sk_[A-Za-z0-9_]{10,}",
    r"tvly-[A-Za-z0-9]{10,}",
    r"exa_[A-Za-z0-9]{10,}",
    r"gsk_[A-Za-z0-9]{10,}",
    r"syt_[A-Za-z0-9]{10,}",
    r"retaindb_[A-Za-z0-9]{10,}",
    r"hsk-[A-Za-z0-9]{10,}",
    r"mem0_[A-Za-z0-9]{10,}",
    r"brv_[A-Za-z0-9]{10,}",
    r"xai-[A-Za-z0-9]{30,}",
    r"ntn_[A-Za-z0-9]{10,}",
    r"fw-[A-Za-z0-9]{30,}",
    r"fw_[A-Za-z0-9]{30,}",
    r"fpk_[A-Za-z0-9]{30,}",
]
_PREFIX_RE = re.compile(r"(?<![A-Za-z0-9_-])(" + "|".join(_PREFIXES) + r")(?![A-Za-z0-9_-])")
# each pattern's literal start: the prefix pass runs only where one occurs
_PREFIX_LITERALS = tuple(re.split(r"[\[(\\.?*+|{^$]", p, maxsplit=1)[0] for p in _PREFIXES)

_ENV_ASSIGN = re.compile(
    r"([A-Z0-9_]{0,50}(?:API_?KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)[A-Z0-9_]{0,50})"
    r"\s*=\s*(['\"]?)(\S+)\2"
)
_CFG_NAMES = r"(?:api[ _.\-]?key|token|secret|passwd|password|credential|auth)"
_CFG_VALUE = r"(['\"]?)([^\s&]+?)\2(?=[\s&]|$)"
_CFG_DOTTED = re.compile(
    rf"((?:[A-Za-z0-9_\-]+\.)+[A-Za-z0-9_.\-]*{_CFG_NAMES}[A-Za-z0-9_.\-]*"
    rf"|[A-Za-z0-9_.\-]*{_CFG_NAMES}[A-Za-z0-9_.\-]*\.[A-Za-z0-9_.\-]+)={_CFG_VALUE}",
    re.IGNORECASE,
)
_CFG_LINE_START = re.compile(
    rf"(^[ \t]*(?:export[ \t]+)?[A-Za-z0-9_\-]*{_CFG_NAMES}[A-Za-z0-9_\-]*)={_CFG_VALUE}",
    re.IGNORECASE | re.MULTILINE,
)
_ENV_LOOKUP = re.compile(r"^(?:os\.(?:getenv|environ)|process\.env|\$ENV\{)")  # a variable's name, not a value
_YAML_ASSIGN = re.compile(
    r"(^[ \t]*[A-Za-z0-9_.\-]*(?:api[ _.\-]?key|token|secret|passwd|password|credential)[A-Za-z0-9_.\-]*)"
    r"(:[ \t]*)(?!['\"])([^\s&]+)",
    re.IGNORECASE | re.MULTILINE,
)
_JSON_FIELD = re.compile(
    r'("(?:api_?[Kk]ey|token|secret|password|access_token|refresh_token|auth_token|bearer|secret_value'
    r'|raw_secret|secret_input|key_material)")\s*:\s*"([^"]+)"',
    re.IGNORECASE,
)
_AUTH_HEADER = re.compile(r"((?:Proxy-)?Authorization:\s*)([A-Za-z][\w.+-]*\s+)?([^\s\"']+)", re.IGNORECASE)
_SECRET_HEADER = re.compile(
    r"((?:x-api-key|x-goog-api-key|api-key|apikey|x-api-token|x-auth-token|x-access-token)\s*:\s*)(\S+)",
    re.IGNORECASE,
)
_TELEGRAM = re.compile(r"(bot)?(\d{8,}):([-A-Za-z0-9_]{30,})")
_PRIVATE_KEY = re.compile(r"-----BEGIN[A-Z ]*PRIVATE KEY-----[\s\S]*?-----END[A-Z ]*PRIVATE KEY-----")
_DB_URL = re.compile(r"((?:postgres(?:ql)?|mysql|mongodb(?:\+srv)?|redis|amqp)://[^:\s]+:)([^@\s]+)(@)", re.IGNORECASE)
_URL_BARE_TOKEN = re.compile(r"((?:https?|wss?|git|ssh|ftp|ftps|sftp)://)([^\s:@/]{8,})(@[^\s]+)", re.IGNORECASE)
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]{10,}(?:\.[A-Za-z0-9_=-]{4,}){0,2}")
_FORM_BODY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*=[^&\s]*(?:&[A-Za-z_][A-Za-z0-9_.-]*=[^&\s]*)+$")
_FORM_KEYS = frozenset(
    {
        "access_token",
        "refresh_token",
        "id_token",
        "token",
        "api_key",
        "apikey",
        "client_secret",
        "password",
        "auth",
        "jwt",
        "session",
        "secret",
        "key",
        "code",
        "signature",
        "x-amz-signature",
    }
)
_PHONE = re.compile(r"(\+[1-9]\d{6,14})(?![A-Za-z0-9])")


def mask(token: str) -> str:
    """Hermes' `_mask_token`: 18 characters or more keep their first 6 and last 4, others are `***`."""
    return f"{token[:6]}...{token[-4:]}" if len(token) >= 18 else "***"


@dataclass
class Redactor:
    """Redacts text as Hermes' exporter does, counting the texts it changed."""

    texts: int = 0

    def text(self, text: str) -> str:
        """`redact_sensitive_text(text, force=True)` of hermes-agent 0.19.0."""
        out = redact_text(text)
        self.texts += out != text
        return out

    def value(self, value: Any) -> Any:
        """Every string within `value` (lists and dicts walked, keys kept), as `redact_session_data` does."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        return value


def redact_text(text: str) -> str:
    """Hermes' passes in Hermes' order, each behind Hermes' gate."""
    if not text:
        return text
    if any(p in text for p in _PREFIX_LITERALS):
        text = _PREFIX_RE.sub(lambda m: mask(m.group(1)), text)
    if "=" in text:
        text = _ENV_ASSIGN.sub(_assigned, text)
        if "://" not in text:
            text = _CFG_DOTTED.sub(_assigned, text)
            text = _CFG_LINE_START.sub(_assigned, text)
    if ":" in text and '"' in text:
        text = _JSON_FIELD.sub(_json_field, text)
    if ":" in text and "://" not in text:
        text = _YAML_ASSIGN.sub(_yaml_value, text)
    if "uthorization" in text or "UTHORIZATION" in text:
        text = _AUTH_HEADER.sub(lambda m: m.group(1) + (m.group(2) or "") + mask(m.group(3)), text)
    if ":" in text:
        text = _SECRET_HEADER.sub(lambda m: m.group(1) + mask(m.group(2)), text)
        text = _TELEGRAM.sub(lambda m: f"{m.group(1) or ''}{m.group(2)}:***", text)
    if "BEGIN" in text and "-----" in text:
        text = _PRIVATE_KEY.sub(lambda m: "[REDACTED PRIVATE KEY]", text)
    if "://" in text:
        text = _DB_URL.sub(lambda m: f"{m.group(1)}***{m.group(3)}", text)
        text = _URL_BARE_TOKEN.sub(lambda m: f"{m.group(1)}{mask(m.group(2))}{m.group(3)}", text)
    if "eyJ" in text:
        text = _JWT.sub(lambda m: mask(m.group(0)), text)
    if "&" in text and "=" in text and "\n" not in text and _FORM_BODY.match(text.strip()):
        text = _form_body(text.strip())
    if "+" in text:
        text = _PHONE.sub(lambda m: _phone(m.group(1)), text)
    return text


def _form_body(body: str) -> str:
    pairs = []
    for pair in body.split("&"):
        key, eq, _value = pair.partition("=")
        pairs.append(f"{key}=***" if eq and key.lower() in _FORM_KEYS else pair)
    return "&".join(pairs)


def _assigned(m: re.Match[str]) -> str:
    name, quote, value = m.group(1), m.group(2), m.group(3)
    return m.group(0) if _ENV_LOOKUP.match(value) else f"{name}={quote}{mask(value)}{quote}"


def _json_field(m: re.Match[str]) -> str:
    return m.group(0) if _ENV_LOOKUP.match(m.group(2)) else f'{m.group(1)}: "{mask(m.group(2))}"'


def _yaml_value(m: re.Match[str]) -> str:
    return m.group(0) if _ENV_LOOKUP.match(m.group(3)) else f"{m.group(1)}{m.group(2)}{mask(m.group(3))}"


def _phone(phone: str) -> str:
    return phone[:2] + "****" + phone[-2:] if len(phone) <= 8 else phone[:4] + "****" + phone[-4:]
