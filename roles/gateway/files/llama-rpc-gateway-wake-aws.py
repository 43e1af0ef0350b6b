# Installed by the graviton.llama_rpc collection (role gateway): a deploy overwrites changes made here.
"""Starts a stopped AWS cluster's instances, for the gateway's wake (wake.lua).

systemd runs this once per connection to its socket on the gateway's loopback (llama-rpc-gateway-wake-aws.socket,
Accept=yes: the connection is stdin and stdout). HAProxy's wake action sends "<region> <cluster>" on one line; this
starts the stopped instances that carry the tag graviton.llama_rpc/cluster=<cluster> in that region, and answers
"starting <ids>", "running" (nothing was stopped) or "refused" (a cluster the gateway does not front:
WAKE_AWS_CLUSTERS, "<region>:<cluster>" with spaces between). Its credentials are the host's: its instance profile
on EC2, else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in /etc/llama-rpc-gateway/aws.env (root only), with the
policy aws_infra made for it (aws_infra_wake_policy, llama-rpc-<cluster>-<region>-wake): ec2:StartInstances on instances
carrying the cluster's tag, and ec2:DescribeInstances. So the gateway can start its clusters and nothing else.
"""

import os
import sys

TAG = "graviton.llama_rpc/cluster"
MAX_LINE = 256


def log(message):
    print(message, file=sys.stderr, flush=True)  # the journal (stdout is the client)


def asked(line, allowed):
    """(region, cluster) the line names, when the gateway fronts it; else None."""
    words = line.decode("ascii", "replace").split()
    if len(words) != 2 or "%s:%s" % tuple(words) not in allowed:
        return None
    return tuple(words)


def start_instances(region, cluster, ec2=None):
    """Starts the cluster's stopped instances (one call); the ids started, and whether any was running already."""
    if ec2 is None:
        import boto3  # python3-boto3, installed by the role with the wake on AWS
        ec2 = boto3.client("ec2", region_name=region)
    found = ec2.describe_instances(Filters=[{"Name": "tag:" + TAG, "Values": [cluster]},
                                            {"Name": "instance-state-name",
                                             "Values": ["pending", "running", "stopping", "stopped"]}])
    states = {instance["InstanceId"]: instance["State"]["Name"]
              for reservation in found["Reservations"] for instance in reservation["Instances"]}
    stopped = sorted(instance for instance, state in states.items() if state == "stopped")
    if stopped:
        ec2.start_instances(InstanceIds=stopped)
    return stopped, any(state in ("pending", "running") for state in states.values())


def main(environ=None, stdin=None, stdout=None, ec2=None):
    environ = os.environ if environ is None else environ
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    target = asked(stdin.readline(MAX_LINE), environ.get("WAKE_AWS_CLUSTERS", "").split())
    if target is None:
        log("refused a wake: not a cluster this gateway fronts")
        stdout.write(b"refused\n")
        stdout.flush()
        return 1
    region, cluster = target
    try:
        started, running = start_instances(region, cluster, ec2)
    except Exception as error:  # boto3's errors: no credentials, a denied call, no network; the client gets a word
        log("could not start cluster %s in %s: %s" % (cluster, region, error))
        stdout.write(b"failed\n")
        stdout.flush()
        return 1
    answer = "starting %s" % " ".join(started) if started else ("running" if running else "no instances")
    log("wake of cluster %s in %s: %s" % (cluster, region, answer))
    stdout.write((answer + "\n").encode())
    stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
