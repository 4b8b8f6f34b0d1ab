"""Secrets in a captured prompt, replaced before it is stored (``hooks.redact_secrets``).

A prompt often carries a pasted key, a ``.env`` line or a connection string, and a stored
memory outlives the session and comes back in later ones. Each ``SecretShape`` below finds
one common shape and replaces the secret with a marker naming it, ``[redacted: github token]``,
keeping what is not secret around it (the key name of a ``password=…`` pair, the user of a
URL). The shapes are tried in order, specific ones first, so a ``token=ghp_…`` pair ends as
``token=[redacted: github token]``. Words such as "password" in a sentence, with no value
after a ``=`` or ``:``, are left alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TOKEN_END = r"(?![A-Za-z0-9_-])"
TOKEN_START = r"(?<![A-Za-z0-9_-])"
"""Around a token: not in the middle of a longer word (``\\b`` fails after a trailing ``-``)."""
HAS_DIGIT = r"(?=[A-Za-z0-9_-]*[0-9])"
"""A token of generated characters holds a digit; a hyphenated word of prose seldom does."""
SECRET_NAME = (r"pass(?:word|wd|phrase)|secret|token|api[_-]?key|access[_-]?key|secret[_-]?key"
               r"|client[_-]?secret|private[_-]?key")
"""The last word of a key whose value is a secret (``DB_PASSWORD``, ``aws_secret_access_key``);
``max_tokens`` or ``secret_santa`` end in another word and are not."""


@dataclass(frozen=True)
class SecretShape:
    """One shape of secret: what it is called in the marker, and the pattern finding it. A
    ``keep`` group in the pattern is what stays before the marker."""

    name: str
    pattern: re.Pattern[str]

    def redact(self, text: str) -> str:
        return self.pattern.sub(lambda found: f"{found.groupdict().get('keep') or ''}[redacted: {self.name}]", text)


def shape(name: str, pattern: str, flags: int = 0) -> SecretShape:
    return SecretShape(name, re.compile(pattern, flags))


SECRET_SHAPES = (
    shape("private key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
          re.DOTALL),  # a PEM block; one whose end was not pasted hides the rest
    shape("jwt", rf"{TOKEN_START}eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]*{TOKEN_END}"),
    shape("anthropic key", rf"{TOKEN_START}sk-ant-[A-Za-z0-9_-]{{20,}}{TOKEN_END}"),
    shape("api key", rf"{TOKEN_START}sk-{HAS_DIGIT}[A-Za-z0-9_-]{{20,}}{TOKEN_END}"),  # OpenAI's and others'
    shape("github token", rf"{TOKEN_START}(?:gh[pousr]_[A-Za-z0-9]{{30,}}|github_pat_[A-Za-z0-9_]{{30,}}){TOKEN_END}"),
    shape("slack token", rf"{TOKEN_START}xox[abpr]-[A-Za-z0-9-]{{10,}}{TOKEN_END}"),
    shape("google api key", rf"{TOKEN_START}AIza[A-Za-z0-9_-]{{35}}{TOKEN_END}"),
    shape("aws access key id", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    shape("password", r"(?P<keep>(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s:/@]+:)[^\s/@]+(?=@)",
          re.IGNORECASE),  # a URL's: scheme://user:password@host
    shape("bearer token", r"(?P<keep>\bBearer\s+)[A-Za-z0-9._~+/-]{20,}=*", re.IGNORECASE),
    shape("secret", rf"(?P<keep>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*?(?:{SECRET_NAME})[\"']?[ \t]*(?::=|[:=])[ \t]*)"
                    r"(?!\[redacted)(?:\"[^\"\n]*\"|'[^'\n]*'|[^\s,;\"']+)", re.IGNORECASE),
)
"""The shapes, in the order they are tried. Each match may start only where a token starts (the
look-behinds), so one pass over a long pasted log stays linear."""


def redact(text: str) -> str:
    """``text`` with every secret of ``SECRET_SHAPES`` replaced by its marker."""
    for secret in SECRET_SHAPES:
        text = secret.redact(text)
    return text
