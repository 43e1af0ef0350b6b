# -*- coding: utf-8 -*-
# Copyright: graviton.llama_rpc contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which names are AWS regions: those the controller's botocore lists for EC2, in every partition it knows (its
endpoints file, which ships with the pinned SDK), and those the user adds for a region newer than that SDK
(aws_infra_regions_extra). A name that is neither would reach AWS as an endpoint that does not exist: under moto a raw
HTTP 500, against AWS a failure that blames the credentials. So it is refused first, with the nearest names."""

from __future__ import annotations

import difflib

try:
    import botocore
    import botocore.session
except ImportError:  # amazon.aws needs boto3 on the controller and says so itself
    botocore = None


def known_regions():
    """(botocore's version, the EC2 regions of every partition it knows), or (None, set()) without botocore."""
    if botocore is None:
        return None, set()
    session = botocore.session.get_session()
    return botocore.__version__, {region for partition in session.get_available_partitions()
                                  for region in session.get_available_regions("ec2", partition)}


def region_problem(region, extra, variable="aws_infra_region", extra_variable="aws_infra_regions_extra"):
    """A sentence saying why `region` is not one to use, or None; `extra` are the regions the user lists beside
    botocore's. Without botocore nothing is said (amazon.aws refuses to run and names it)."""
    version, regions = known_regions()
    if version is None or region in regions or region in (extra or []):
        return None
    # the closest first, alphabetically among equals (difflib alone puts equals last first)
    nearest = sorted(difflib.get_close_matches(str(region), regions, n=3, cutoff=0.6),
                     key=lambda name: (-difflib.SequenceMatcher(None, str(region), name).ratio(), name))
    return ("%s='%s' is not an AWS region: the controller's botocore %s lists no such region for EC2 in any partition%s. "
            "Set it to the region to use (aws ec2 describe-regions lists those open to your account); for a region "
            "newer than that botocore, add its name to %s." % (
                variable, region, version,
                " (the nearest: %s)" % ", ".join(nearest) if nearest else "", extra_variable))
