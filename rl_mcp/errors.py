"""The one base class of every error a user (an agent) should read, with what to do about it.

The domain raises subclasses of `UserError`; the MCP layer turns exactly these into tool errors
(mcp_api/errors.py). Anything else is a bug and surfaces as one.
"""

from __future__ import annotations


class UserError(Exception):
    """An expected failure; the message names the bad value and the fix."""
