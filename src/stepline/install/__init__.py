"""Installing workflow packages into a project (BMAD modules into ``{project}/_bmad/``)."""

from __future__ import annotations

from stepline.install._bmad import InstalledModule, InstallReport, install_bmad

__all__ = ["InstallReport", "InstalledModule", "install_bmad"]
