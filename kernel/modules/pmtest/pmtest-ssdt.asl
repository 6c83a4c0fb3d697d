/*
 * SSDT for the pmlab guest: two ACPI devices for pmtest_acpi.c, the second
 * inside the first, so Linux enumerates platform devices PMTS0001:00 and
 * PMTS0001:01 (a child of :00) and attaches both to acpi_general_pm_domain;
 * and one device each of PMTS0002, PMTS0003 and PMTS0004 for its
 * pmtest_acpi_smart driver (DPM_FLAG_SMART_PREPARE/SMART_SUSPEND).
 * kernel/build compiles it with iasl (acpica-tools) into
 * build/out/pmtest-ssdt.aml; lab/virt.py hands that to QEMU with -acpitable.
 */
DefinitionBlock ("", "SSDT", 2, "PMLAB", "PMTEST", 0x00000001)
{
    Scope (\_SB)
    {
        Device (PMT0)
        {
            Name (_HID, "PMTS0001")
            Name (_UID, Zero)

            Device (PMT1)
            {
                Name (_HID, "PMTS0001")
                Name (_UID, One)
            }
        }

        Device (PMS2)
        {
            Name (_HID, "PMTS0002")
            Name (_UID, Zero)
        }

        Device (PMS3)
        {
            Name (_HID, "PMTS0003")
            Name (_UID, Zero)
        }

        Device (PMS4)
        {
            Name (_HID, "PMTS0004")
            Name (_UID, Zero)
        }
    }
}
