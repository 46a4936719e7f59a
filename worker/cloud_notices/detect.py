"""Which cloud's notices to read: SPOTREEL_CLOUD_NOTICES, or with `auto` the machine's DMI identity.

Only local files are read (/sys/class/dmi/id: the firmware's vendor, product, board and asset tag), never the
network: probing a metadata address from a machine that is on no cloud would send traffic where it does not
belong, and cost a timeout at every start.
"""

from __future__ import annotations

from pathlib import Path

CLOUDS = ("aws", "gcp", "azure")
CHOICES = ("auto", *CLOUDS, "off")
DMI_DIR = Path("/sys/class/dmi/id")
DMI_FILES = ("sys_vendor", "product_name", "product_version", "bios_vendor", "bios_version", "board_vendor",
             "board_name", "chassis_vendor", "chassis_asset_tag")
# Azure's VMs carry this chassis asset tag whatever their vendor strings say.
AZURE_ASSET_TAG = "7783-7084-3265-9085-8269-3286-77"


def cloud_of(dmi: dict[str, str]) -> str | None:
    """The cloud that DMI fields (file name → content) name, or None. EC2's Nitro machines say "Amazon EC2"
    as vendor, its Xen ones "amazon" in the BIOS version; GCE says "Google" / "Google Compute Engine";
    Azure's Hyper-V VMs say "Microsoft Corporation" / "Virtual Machine" and carry Azure's asset tag."""
    values = {k: v.strip().lower() for k, v in dmi.items()}
    joined = " ".join(values.values())
    if "amazon ec2" in joined or "amazon" in values.get("bios_version", "") or values.get("sys_vendor") == "amazon":
        return "aws"
    if "google compute engine" in joined or values.get("sys_vendor") == "google":
        return "gcp"
    if values.get("chassis_asset_tag") == AZURE_ASSET_TAG:
        return "azure"
    if values.get("sys_vendor") == "microsoft corporation" and values.get("product_name") == "virtual machine":
        return "azure"
    return None


def read_dmi(directory: Path = DMI_DIR) -> dict[str, str]:
    found = {}
    for name in DMI_FILES:
        try:
            found[name] = (directory / name).read_text(errors="replace")
        except OSError:
            continue  # absent (not a DMI machine) or root-only (chassis_asset_tag on some kernels)
    return found


def choose(setting: str, directory: Path = DMI_DIR) -> str | None:
    """The cloud to read notices from, or None (off, or `auto` on a machine of no known cloud)."""
    value = setting.strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"SPOTREEL_CLOUD_NOTICES must be one of {', '.join(CHOICES)}, got {setting!r}")
    if value == "off":
        return None
    if value == "auto":
        return cloud_of(read_dmi(directory))
    return value
