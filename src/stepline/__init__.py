"""stepline: run BMAD and Claude-Code-Workflow agent workflows deterministically, durably and auditably."""

from __future__ import annotations

__version__ = "0.1.0"
