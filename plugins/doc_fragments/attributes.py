# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The attributes every module of this collection shares: each module states its own check_mode support."""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods

    # The modules run on the managed host (POSIX) and return no diff.
    DOCUMENTATION = r"""
attributes:
  diff_mode:
    support: none
  platform:
    platforms: posix
"""
