"""The static scan a skill passes before ``lily skills install`` copies it
(docs/skills-compat.md#installing-skills).

Nothing in the skill is run: files are read as bytes and matched against the
patterns that malicious skills have used (fetch-and-run install steps, encoded
payloads piped to a shell, native binaries), and the tree itself is checked
(symlinks leaving the skill, special files, sizes). Each finding names its file
and, for a text pattern, its line. A *hard* finding (a symlink leaving the skill,
a special file) refuses the install even with ``--allow-risky``.
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_BYTES = 1024 * 1024  # one file in a skill
MAX_TOTAL_BYTES = 16 * 1024 * 1024  # the whole skill
MAX_FILES = 2_000
_SNIFF = 8192  # bytes read to tell a binary from text

# Data files that are binary by nature and harmless to copy (images, fonts, documents).
DATA_SUFFIXES = frozenset((".png", ".jpg", ".jpeg", ".gif", ".webp", ".ico", ".bmp", ".pdf",
                           ".ttf", ".otf", ".woff", ".woff2", ".docx", ".xlsx", ".pptx"))
_NATIVE_MAGIC = ((b"\x7fELF", "an ELF executable"), (b"MZ", "a Windows executable"),
                 (b"\xcf\xfa\xed\xfe", "a Mach-O executable"),
                 (b"\xce\xfa\xed\xfe", "a Mach-O executable"),
                 (b"\xca\xfe\xba\xbe", "a Mach-O universal binary or Java class"),
                 (b"\x00asm", "a WebAssembly module"))

_SHELLS = r"(?:sudo\s+)?(?:ba|z|da|k|fi|c)?sh\b|python[0-9.]*\b|perl\b|ruby\b|node\b|php\b|iex\b"
_FETCH = r"(?:curl|wget|fetch|aria2c|Invoke-WebRequest|iwr|Invoke-RestMethod|irm)\b"
_DECODE = (r"(?:base64\s+(?:-d|--decode|-D)\b|openssl\s+(?:enc\s+)?(?:-d\s+)?-?base64\s+-d|"
           r"xxd\s+-r|certutil\s+-decode)")
# (pattern, reason) for one line of text; the first that matches a line is reported.
LINE_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(_FETCH + r"[^\n|;]*\|\s*(?:" + _SHELLS + ")", re.I),
     "downloads code and pipes it to an interpreter (fetch and run)"),
    (re.compile(r"(?:<\(|\$\(|`)\s*" + _FETCH, re.I),
     "runs what a download returns (fetch and run)"),
    (re.compile(r"(?:DownloadString|DownloadFile)\s*\(|\biex\s*\(\s*(?:New-Object|iwr|irm)", re.I),
     "downloads code and runs it (PowerShell fetch and run)"),
    (re.compile(_DECODE + r"[^\n]*\|\s*(?:" + _SHELLS + ")", re.I),
     "decodes an encoded payload and pipes it to an interpreter"),
    (re.compile(r"\b(?:exec|eval|Function)\s*\(\s*(?:base64\.b64decode|atob|codecs\.decode|"
                r"zlib\.decompress|marshal\.loads|bytes\.fromhex|Buffer\.from)", re.I),
     "evaluates decoded data as code (obfuscated payload)"),
    (re.compile(r"powershell[^\n]*\s-(?:e|ec|enc|encodedcommand)\s+[A-Za-z0-9+/=]{16,}", re.I),
     "runs an encoded PowerShell command"),
    (re.compile(r"[A-Za-z0-9+/]{400,}={0,2}"),
     "holds a long encoded blob (a possible obfuscated payload)"),
    (re.compile(r"(?:\\x[0-9a-fA-F]{2}){40,}"),
     "holds a long run of hex escapes (a possible obfuscated payload)"),
)


@dataclass(frozen=True)
class Finding:
    """One reason not to install: the file (relative to the skill), its line, why."""

    path: str
    line: int | None
    reason: str
    hard: bool = False  # refused even with --allow-risky

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.reason}"


def scan(folder: Path) -> list[Finding]:
    """Every finding in the skill folder ``folder``, sorted by path then line."""
    findings: list[Finding] = []
    real_root = os.path.realpath(folder)
    total = files = 0
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder).replace(os.sep, "/")
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                target = os.path.realpath(path)
                if os.path.commonpath([real_root, target]) != real_root:
                    findings.append(Finding(rel, None, f"a symlink leaving the skill "
                                            f"(to {os.readlink(path)})", hard=True))
                continue
            if stat.S_ISDIR(st.st_mode):
                continue
            if not stat.S_ISREG(st.st_mode):
                findings.append(Finding(rel, None, "not a regular file (a device, FIFO or "
                                        "socket)", hard=True))
                continue
            files += 1
            total += st.st_size
            findings += scan_file(path, rel, st)
    if files > MAX_FILES:
        findings.append(Finding(".", None, f"{files} files; the cap is {MAX_FILES:,}"))
    if total > MAX_TOTAL_BYTES:
        findings.append(Finding(".", None, f"{total:,} bytes in all; the cap is "
                                f"{MAX_TOTAL_BYTES:,}"))
    return sorted(findings, key=lambda f: (f.path, f.line or 0))


def scan_file(path: str, rel: str, st: os.stat_result) -> list[Finding]:
    """The findings of one regular file: size, executable bit, native code, text patterns."""
    out: list[Finding] = []
    if st.st_size > MAX_FILE_BYTES:
        return [Finding(rel, None, f"{st.st_size:,} bytes; the cap for one file is "
                        f"{MAX_FILE_BYTES:,}")]
    if st.st_mode & (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH):
        out.append(Finding(rel, None, "an executable file (its execute permission is set)"))
    with open(path, "rb") as fh:
        data = fh.read()
    head = data[:_SNIFF]
    for magic, what in _NATIVE_MAGIC:
        if head.startswith(magic) and (magic != b"MZ" or b"PE\0\0" in head):
            return [*out, Finding(rel, None, f"a binary: {what}")]
    if b"\0" in head:
        if Path(rel).suffix.lower() not in DATA_SUFFIXES:
            out.append(Finding(rel, None, "a binary file of unknown type"))
        return out
    text = data.decode("utf-8", errors="replace")
    for number, line in enumerate(text.splitlines(), 1):
        for rule, reason in LINE_RULES:
            if rule.search(line):
                out.append(Finding(rel, number, reason))
                break
    return out
