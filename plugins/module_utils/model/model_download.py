# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP for a model's parts, through Ansible's own client (ansible.module_utils.urls: proxies from the environment, the
system's CA bundle): ranged requests that resume, a one-byte probe that asks a source's size and whether it answers, and
the refusals no retry mends, each naming the variable to change.

A bearer token goes to the source's own host only: redirects are followed here, one hop at a time, and a hop to another
host (Hugging Face sends downloads on to a CDN) goes without it. An S3 signed URL carries its own credentials: no token
is sent with it (S3 refuses a request with two).
"""

from __future__ import annotations

from urllib.error import HTTPError
from urllib.parse import urlsplit

from ansible.module_utils.urls import Request

from ansible_collections.graviton.llama_rpc.plugins.module_utils.model import fetch_ranges

AGENT = "graviton.llama_rpc model_fetch"
REDIRECTS = (301, 302, 303, 307, 308)
MOST_REDIRECTS = 10


class Refused(Exception):
    """A failure no retry will mend (the source refused, a wrong checksum, a full disk): the message says what to do."""


class Source:
    """Opens a model's sources, with the token where it belongs."""

    def __init__(self, token="", timeout=60):
        self.token = token
        # redirects are followed by open() itself, to decide per hop whether the token goes along
        self.client = Request(timeout=timeout, http_agent=AGENT, follow_redirects="none", use_netrc=False,
                              decompress=False)

    def open(self, url, offset=0, probe=False, last=None):
        """The response to a GET of url: from offset on (Range), up to byte last when given, or its first byte only
        (probe)."""
        headers = {}
        if probe:
            headers["Range"] = "bytes=0-0"
        elif last is not None:
            headers["Range"] = "bytes=%d-%d" % (offset, last)
        elif offset:
            headers["Range"] = "bytes=%d-" % offset
        origin = urlsplit(url).hostname
        signed = "X-Amz-Signature=" in url
        for _hop in range(MOST_REDIRECTS + 1):
            sent = dict(headers)
            if self.token and not signed and urlsplit(url).hostname == origin:
                sent["Authorization"] = "Bearer %s" % self.token
            try:
                return self.client.get(url, headers=sent)
            except HTTPError as error:
                if error.code not in REDIRECTS:
                    raise
                error.close()
                url = error.geturl()  # the redirect's target, made absolute by urllib
        raise Refused("the source redirects more than %d times (last to %s's host): check rpc_master_model_src."
                      % (MOST_REDIRECTS, urlsplit(url).hostname))

    def size(self, url):
        """The source's size in bytes (None when it does not say), from a one-byte request. Raises HTTPError."""
        return self.probe(url)["total"]

    def probe(self, url):
        """From a one-byte request: the source's size in bytes (None when it does not say), whether it answers byte
        ranges (206 with the size), and its validator (ETag, Last-Modified). Raises HTTPError."""
        with self.open(url, probe=True) as response:
            found = {"total": None, "ranged": False, "validator": fetch_ranges.validator(response.headers)}
            if response.status == 206:
                try:
                    found["total"] = fetch_ranges.content_range(response.headers.get("Content-Range"))[2]
                except ValueError:
                    return found
                found["ranged"] = found["total"] is not None
                return found
            length = response.headers.get("Content-Length")
            if length is not None and response.status == 200 and length.isdigit():
                found["total"] = int(length)
            return found


def total_of(response, have):
    """The whole file's size from a response to a request from byte have on (None when unknown)."""
    ranged = response.headers.get("Content-Range", "")
    if "/" in ranged and not ranged.endswith("*"):
        return int(ranged.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return have + int(length) if length is not None else None


def refusal(what, error, token_given):
    """The message for an HTTP error no retry mends, or None. what: "part 2 (NAME)", "the checksum file"."""
    if error.code in (401, 403):
        if token_given:
            return ("the source refused %s with the token given (HTTP %d): rpc_master_model_token has no access to it. "
                    "Check the token's read access to the repository, and accept the model's terms on its page with the "
                    "token's account." % (what, error.code))
        return ("the source refused %s (HTTP %d): a gated or private model needs rpc_master_model_token (for Hugging "
                "Face an access token with read access, its account having accepted the model's terms); an S3 object "
                "needs the controller's credentials to allow s3:GetObject." % (what, error.code))
    if error.code == 404:
        return ("%s is not at its source (HTTP 404): check rpc_master_model_src (the set's name and its number of parts) "
                "and rpc_master_model_sha256sums." % what)
    return None


def fetch_text(source, url, limit=1 << 22):
    """A small text file (a checksum file), or Refused."""
    try:
        with source.open(url) as response:
            return response.read(limit).decode("utf-8", errors="replace")
    except HTTPError as error:
        raise Refused(refusal("the checksum file (rpc_master_model_sha256sums)", error, bool(source.token))
                      or "rpc_master_model_sha256sums could not be fetched: HTTP %d" % error.code)
    except OSError as error:  # URLError is an OSError
        raise Refused("rpc_master_model_sha256sums could not be fetched: %s" % getattr(error, "reason", error))
