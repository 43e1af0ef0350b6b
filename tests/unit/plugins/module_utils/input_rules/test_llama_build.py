"""The input rules of llama_build (module_utils/input_rules/llama_build.py), case by case: each bad setting is refused with a
sentence that names it and the fix, only the wrong ones are named, and the role's own defaults pass.
What to build; the CPU's flags, the archive's contents and the disk are the host's."""

import pytest
from tests.unit.plugins.module_utils.input_rules.rules import refusals, check

BUILD = {"min_safe_version": 8492,
         "patch_files": ["b11312/rpc_hash_ahead.patch", "b11312/rpc_known_hashes.patch", "b11312/rpc_tensor_parallel.patch"]}
ARCHIVE = {"llama_build_source": "archive", "llama_build_archive_src": "/srv/llama.tar.gz",
           "llama_build_archive_sha256": "ab" * 32, "llama_build_archive_subdir": "llama.cpp"}

BUILD_CASES = {
    "old pin": ({"llama_build_version": "b8000"}, ["older than b8492", "CVE-2026-34159", "llama_build_allow_vulnerable_version"]),
    "not a release tag": ({"llama_build_version": "latest"}, ["llama_build_version=latest is not a llama.cpp tag"]),
    "a tag with something after it": ({"llama_build_version": "b11312-rc"}, ["llama_build_version=b11312-rc is not a"]),
    "checksum not hex": (dict(ARCHIVE, llama_build_archive_sha256="abc"),
                         ["llama_build_source=archive needs: llama_build_archive_sha256 (64 hex digits, now 'abc')"]),
    "an archive source without its settings": (
        {"llama_build_source": "archive"},
        ["llama_build_source=archive needs: llama_build_archive_src (empty): set it to the archive's URL or a path on the "
         "controller. llama_build_archive_sha256 (64 hex digits, now ''): set it to the archive's sha256. "
         "llama_build_archive_subdir (empty): set it to the directory with llama.cpp's CMakeLists.txt."]),
    "a patch for another release": ({"llama_build_version": "b11400", "llama_build_patches": ["rpc_hash_ahead"]},
                                    ["rpc_hash_ahead, which is written for llama.cpp b11312, not for "
                                     "llama_build_version=b11400", "Pin b11312, or remove rpc_hash_ahead"]),
    "an unknown patch": ({"llama_build_patches": ["rpc_fast"]},
                         ["'rpc_fast', which is not one of the collection's patches (rpc_hash_ahead, rpc_known_hashes, rpc_tensor_parallel)"]),
    "patches not a list": ({"llama_build_patches": "rpc_hash_ahead"},
                           ["llama_build_patches='rpc_hash_ahead' is not a list of patch names"]),
    "a patch twice": ({"llama_build_patches": ["rpc_hash_ahead", "rpc_hash_ahead"]}, ["names a patch twice"]),
    "two patches of the same code": ({"llama_build_patches": ["rpc_known_hashes", "rpc_hash_ahead"]},
                                     ["llama_build_patches has both rpc_hash_ahead and rpc_known_hashes, which change the "
                                      "same code of the master's load (rpc_known_hashes hashes what it must on one thread "
                                      "per worker). List one of them"]),
}


def test_llama_build_defaults_pass():
    assert refusals("llama_build", BUILD, {}) == []
    assert refusals("llama_build", BUILD, ARCHIVE) == []
    # the archive's settings are not asked for with the git source; an old pin is accepted when the risk is
    assert refusals("llama_build", BUILD, {"llama_build_archive_sha256": "abc"}) == []
    assert refusals("llama_build", BUILD, {"llama_build_version": "b8000", "llama_build_allow_vulnerable_version": True}) == []
    assert refusals("llama_build", BUILD, {"llama_build_patches": ["rpc_hash_ahead"]}) == []
    assert refusals("llama_build", BUILD, {"llama_build_patches": ["rpc_known_hashes"]}) == []
    # tensor parallelism's patch goes with either of the load's
    for load in ("rpc_known_hashes", "rpc_hash_ahead"):
        assert refusals("llama_build", BUILD, {"llama_build_patches": [load, "rpc_tensor_parallel"]}) == []


def test_the_patches_releases_are_the_roles_files():
    """The role passes its files/patches as <release>/<name>.patch; each patch is written for the release it lies under,
    and the default pin has every patch the collection ships."""
    from ansible_collections.graviton.llama_rpc.plugins.module_utils.input_rules.llama_build import patch_tags
    from tests.unit.plugins.module_utils.input_rules.rules import ROOT, defaults
    patches = ROOT / "roles" / "llama_build" / "files" / "patches"
    files = sorted(str(path.relative_to(patches)) for path in patches.glob("*/*.patch"))
    releases = patch_tags(files)
    assert releases == {"rpc_cache_check": ["b11312"], "rpc_hash_ahead": ["b11312"], "rpc_known_hashes": ["b11312"],
                        "rpc_lost_worker": ["b11312"], "rpc_tensor_parallel": ["b11312"]}
    assert all(defaults("llama_build")["llama_build_version"] in found for found in releases.values())


@pytest.mark.parametrize("case", sorted(BUILD_CASES))
def test_llama_build_bad_input_is_refused_by_name(case):
    overrides, messages = BUILD_CASES[case]
    assert len(check("llama_build", BUILD, overrides, messages)) == 1
