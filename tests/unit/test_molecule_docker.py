"""The cluster scenario's lean create (tests/tools/molecule_docker.py): its platforms become the container options the
docker driver gave them, and a platform key it does not handle is refused, not left out."""

import re
from pathlib import Path

import pytest
import yaml

from tests.tools import molecule_docker

SCENARIO = Path(__file__).resolve().parents[2] / "molecule" / "cluster" / "molecule.yml"


def platforms():
    """As Molecule resolves them: ${VAR:-default} to its default here, any other ${VAR} to a path."""
    text = re.sub(r"\$\{(\w+)(?::-([^}]*))?\}", lambda found: found.group(2) if found.group(2) is not None
                  else f"/env/{found.group(1)}", SCENARIO.read_text())
    return yaml.safe_load(text)["platforms"]


def test_every_platform_of_the_cluster_scenario_has_its_options():
    planned = {options["name"]: (options, networks) for options, networks in map(molecule_docker.container_options, platforms())}
    assert sorted(planned) == sorted(platform["name"] for platform in platforms())
    master, networks = planned["llama-master"]
    assert networks == ["llama-rpc-master"] and master["network"] == "llama-rpc-master"
    assert master["image"] == "llama-rpc-testbed:bookworm" and master["command"] == "/lib/systemd/systemd"
    assert master["cap_add"] == ["SYS_ADMIN", "NET_ADMIN"] and master["cgroupns"] == "host"
    assert master["tmpfs"] == {"/run": "", "/run/lock": "", "/tmp": ""} and master["stop_signal"] == "SIGRTMIN+3"
    assert master["tty"] is True and master["privileged"] is False and master["labels"] == {"owner": "molecule"}
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in master["volumes"] and master["hostname"] == "llama-master"
    # what each platform says differs, over the first one's settings (the YAML merge)
    assert planned["llama-worker-2"][0]["image"] == "llama-rpc-testbed:trixie"
    assert planned["llama-master-b"][0]["devices"] == ["/dev/net/tun:/dev/net/tun:rwm"]
    assert planned["llama-worker-1"][0]["devices"] == []


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("false", False), (True, True), ("no", False)])
def test_privileged_as_the_environment_gives_it(value, expected):
    platform = dict(platforms()[0], privileged=value)
    assert molecule_docker.container_options(platform)[0]["privileged"] is expected


@pytest.mark.parametrize(("change", "message"), [
    ({"published_ports": ["8080:80"]}, "platform llama-master: published_ports not handled"),
    ({"pre_build_image": False}, "only pre-built images"),
    ({"privileged": "maybe"}, "privileged='maybe' is not true or false"),
    # an empty ${VAR} is not false: docker_container, under the driver, refused it too
    ({"privileged": ""}, "privileged='' is not true or false"),
    ({"name": ""}, "a platform without a name"),
])
def test_what_it_cannot_start_as_the_driver_would_is_refused(change, message):
    with pytest.raises(molecule_docker.PlatformError, match=message):
        molecule_docker.container_options(dict(platforms()[0], **change))
