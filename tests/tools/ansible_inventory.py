"""`ansible-inventory --list` output read as the variables it stands for.

It prints a string Ansible does not trust as a template (what an inventory plugin's compose makes) as
{"__ansible_unsafe": "..."}; Ansible's own decoder reads that back as the string."""

UNSAFE = "__ansible_unsafe"


def unwrapped(value):
    """value with every {"__ansible_unsafe": s} replaced by s, at any depth."""
    if isinstance(value, dict):
        if value.keys() == {UNSAFE}:
            return value[UNSAFE]
        return {key: unwrapped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrapped(item) for item in value]
    return value
