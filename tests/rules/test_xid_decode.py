"""NVLink5 Xid 144-150 decode against the worked examples of the decode sheet (docs/domain.md §1.4)."""

from __future__ import annotations

import pytest

from firstfault.rules.gpu_driver import decode_nvlink5, decode_rows


@pytest.mark.parametrize("xid,intrinfo,status,unit,symptom,immediate,investigatory", [
    (149, 0x004505C6, 0, "NETIR_LINK_EVT", "XID-149.4", "RESET_GPU", "INVESTIGATE_LINK_SI"),
    (149, 0x021425C6, 0, "NETIR_LINK_EVT", "XID-149.33", "RESET_GPU", "INVESTIGATE_PEER_DEVICE"),
    (149, 0x025001C6, 0, "NETIR_LINK_EVT", "XID-149.37", "RESET_GPU", "INVESTIGATE_PEER_DEVICE"),
    (149, 0x026001C6, 0, "NETIR_LINK_EVT", "XID-149.38", "IGNORE", "INVESTIGATE_SW/USER"),
    (149, 0x00086226, 0, "NETIR_BER_EVENT", "XID-149.NETIR_BER_EVENT", "IGNORE", "INVESTIGATE_LINK_SI_AND_CABLES"),
    (149, 0x000FE406, 0, "NETIR", "XID-149.NETIR", "RESET_GPU", "SYMPATHETIC_REPORT_SOLO"),
    (145, 0x0409A0C2, 0x8, "RLW_RXPIPE", "XID-145.RLW_RXPIPE", "IGNORE", "CONTACT_SUPPORT"),
])
def test_worked_examples(xid: int, intrinfo: int, status: int, unit: str, symptom: str, immediate: str,
                         investigatory: str) -> None:
    decoded = decode_nvlink5(xid, intrinfo, status, unit)
    assert decoded is not None
    assert (decoded.symptom, decoded.immediate, decoded.investigatory) == (symptom, immediate, investigatory)


def test_subcode_is_bits_25_to_20() -> None:
    decoded = decode_nvlink5(149, 0x0215E5C6, 0, "NETIR_LINK_EVT")
    assert decoded is not None and decoded.subcode == (0x0215E5C6 >> 20) & 0x3F == 33


def test_driver_version_selects_the_unit_layout() -> None:
    # 0x004505c6: V1 unit bits 9:5 = NETIR_LINK_EVT; under the V2 layout (R575+) no row matches this word.
    assert decode_nvlink5(149, 0x004505C6, 0, "", driver_major=570) is not None
    assert decode_nvlink5(149, 0x004505C6, 0, "", driver_major=580) is None


def test_fatal_rows_are_bad_and_ignore_rows_are_not() -> None:
    assert decode_nvlink5(149, 0x004505C6, 0, "NETIR_LINK_EVT").fatal
    assert not decode_nvlink5(149, 0x00086226, 0, "NETIR_BER_EVENT").fatal


def test_table_covers_every_nvlink5_code() -> None:
    assert {row.xid for row in decode_rows()} == set(range(144, 151))


def test_xid74_register_decode() -> None:
    from firstfault.rules.gpu_driver import decode_xid74

    example = decode_xid74("0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0")  # 3rd register bit 16 (catalog example)
    assert example is not None and example.fatal and example.classes == {"hw_link"}
    assert "register 3 bit 16" in example.notes[0]
    ignorable = decode_xid74("0x1, 0x0, 0x0, 0x0, 0x100000, 0x0, 0x0")  # r1 bit 0 + r5 bit 20
    assert ignorable is not None and not ignorable.fatal
    assert decode_xid74("0x0, 0x0, 0x0, 0x0, 0x0, 0x0, 0x0") is None
    unknown = decode_xid74("0x0, 0x4, 0x0, 0x0, 0x0, 0x0, 0x0")
    assert unknown is not None and unknown.fatal and "unknown bit" in unknown.notes[0]
