"""The cluster scenario's create and destroy (molecule/cluster/create.yml, destroy.yml): the platforms of its
molecule.yml started and removed as molecule-plugins' docker driver does, in one process.

Why not the driver's own playbooks: they make one local module run (each importing the docker SDK) per platform and
step, polled through async jobs. Under make test's load they took 75 to 95 s (create) and 16 to 34 s (destroy) of the
cluster scenario, the run's longest path; this does the same in seconds. The same container options as the driver
(community.docker.docker_container with its compatibility defaults, networks_cli_compatible), the same labels on what
it makes, and the same connection (the driver's: community.docker.docker by name). A platform key this file does not
know is refused by name rather than left out.

    python -m tests.tools.molecule_docker create|destroy MOLECULE_FILE
"""

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor

import yaml
from ansible.module_utils.parsing.convert_bool import boolean as ansible_boolean

# What the driver labels its containers and networks with (its create.yml, molecule_labels); its destroy removes only
# networks labelled so.
LABELS = {"owner": "molecule"}
# The platform keys the cluster scenario uses (container_options: what each becomes). `groups` is Molecule's inventory.
KNOWN_KEYS = {"name", "image", "pre_build_image", "command", "privileged", "capabilities", "cgroupns_mode", "volumes",
              "tmpfs", "stop_signal", "tty", "networks", "devices", "hostname", "groups"}


class PlatformError(ValueError):
    """A platform this file cannot start as the driver would."""


def boolean(value, key, name):
    """A platform's yes/no (YAML's, or an interpolated ${VAR:-false}), read as the driver's docker_container reads it."""
    try:
        return ansible_boolean(value, strict=True)
    except TypeError:
        raise PlatformError(f"platform {name}: {key}={value!r} is not true or false") from None


def container_options(platform):
    """docker SDK keyword arguments for one platform of molecule.yml (pre-built images only, as the scenario's)."""
    name = platform.get("name")
    if not name:
        raise PlatformError(f"a platform without a name: {platform}")
    unknown = sorted(set(platform) - KNOWN_KEYS)
    if unknown:
        raise PlatformError(f"platform {name}: {', '.join(unknown)} not handled by tests/tools/molecule_docker.py: "
                            "add it there (as community.docker.docker_container takes it), or use the driver's create")
    if not boolean(platform.get("pre_build_image", False), "pre_build_image", name):
        raise PlatformError(f"platform {name}: only pre-built images (pre_build_image: true): tests/bed/images.sh builds them")
    networks = [network["name"] for network in platform.get("networks", [])]
    options = {
        "name": name, "hostname": platform.get("hostname", name), "image": platform["image"], "detach": True,
        "labels": dict(LABELS), "tty": boolean(platform.get("tty", False), "tty", name),
        "privileged": boolean(platform.get("privileged", False), "privileged", name),
        "cap_add": list(platform.get("capabilities", [])), "volumes": list(platform.get("volumes", [])),
        "tmpfs": {path: "" for path in platform.get("tmpfs", [])},
        # docker run's --device PATH: the same path inside, read, write and mknod
        "devices": [f"{device}:{device}:rwm" if ":" not in device else device for device in platform.get("devices", [])],
        "log_config": {"type": "json-file"},
    }
    # The driver's default command keeps a container without an init up; these run systemd.
    options["command"] = platform.get("command", 'bash -c "while true; do sleep 10000; done"')
    for key, option in (("stop_signal", "stop_signal"), ("cgroupns_mode", "cgroupns")):
        if key in platform:
            options[option] = platform[key]
    if networks:
        options["network"] = networks[0]
    return options, networks


def read_platforms(molecule_file):
    with open(molecule_file, encoding="utf-8") as config:
        return yaml.safe_load(config)["platforms"]


def create(client, platforms):
    from tests.tools import containers  # pylint: disable=import-outside-toplevel  # imports docker

    planned = [container_options(platform) for platform in platforms]  # every platform checked before anything starts
    for network in dict.fromkeys(network for _options, networks in planned for network in networks):
        if not containers.named_networks(client, network):
            client.networks.create(network, labels=dict(LABELS))

    def start(plan):
        options, networks = plan
        containers.remove_named(client, options["name"])  # left by an interrupted run
        container = client.containers.run(**options)
        for network in networks[1:]:
            client.networks.get(network).connect(container)
        return options["name"]

    with ThreadPoolExecutor(max_workers=len(planned) or 1) as pool:
        for started in pool.map(start, planned):
            print(f"started {started}")


def destroy(client, platforms):
    from tests.tools import containers  # pylint: disable=import-outside-toplevel  # imports docker

    names = [platform["name"] for platform in platforms]

    def remove(name):  # killed, its volumes kept: the driver's force_kill and keep_volumes
        return f"removed {name}" if containers.remove_named(client, name) else f"{name}: none"

    with ThreadPoolExecutor(max_workers=len(names) or 1) as pool:
        for done in pool.map(remove, names):
            print(done)
    for network in dict.fromkeys(network["name"] for platform in platforms for network in platform.get("networks", [])):
        for found in containers.named_networks(client, network):
            if found.attrs.get("Labels", {}).get("owner") == LABELS["owner"]:
                found.remove()
                print(f"removed network {network}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["create", "destroy"])
    parser.add_argument("molecule_file", help="the scenario's molecule.yml as Molecule resolved it (MOLECULE_FILE)")
    args = parser.parse_args(argv)
    import docker  # pylint: disable=import-outside-toplevel  # the unit tests (any venv) read the options only

    try:
        platforms = read_platforms(args.molecule_file)
        (create if args.action == "create" else destroy)(docker.from_env(), platforms)
    except PlatformError as error:
        sys.exit(f"molecule_docker: {error}")


if __name__ == "__main__":
    main()
