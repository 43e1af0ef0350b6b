"""Which names are AWS regions (module_utils/aws/regions.py): botocore's own list, every partition, and what the user
adds; the nearest names of a misspelt one."""

from ansible_collections.graviton.llama_rpc.plugins.module_utils.aws import regions


def test_the_regions_are_botocores_in_every_partition():
    import botocore  # pylint: disable=import-outside-toplevel
    version, known = regions.known_regions()
    assert version == botocore.__version__
    assert {"us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"} <= known and "mars-1" not in known


def test_a_region_is_refused_with_its_nearest_names_unless_the_user_lists_it():
    assert regions.region_problem("eu-west-1", []) is None
    assert regions.region_problem("eu-south-9", ["eu-south-9"]) is None
    said = regions.region_problem("us-east-l", [])
    assert said.startswith("aws_infra_region='us-east-l' is not an AWS region: the controller's botocore ")
    assert "(the nearest: us-east-1, " in said and said.endswith("add its name to aws_infra_regions_extra.")
    assert "(the nearest" not in regions.region_problem("zzzzzzzz", [])
