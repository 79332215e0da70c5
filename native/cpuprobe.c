/*
 * cpuprobe: ask the CPU and the kernel which vector instruction sets this process can run.
 *
 * Prints one "key value" pair a line, feature names spelt as Linux spells them in /proc/cpuinfo,
 * so that the Python side reads probe output and cpuinfo dumps with one table:
 *   arch x86_64
 *   known <every feature name the probe checks>
 *   cpuid_flags <what CPUID advertises>
 *   flags <what CPUID advertises AND the OS enabled the register state for>
 *   xcr0 0x...            (x86: XGETBV(0); which register state the OS saves)
 *   avx10_version N       (x86: 0 when AVX10 is absent)
 *   amx_permitted 0|1     (x86 Linux: the kernel granted this process AMX tile data)
 *   hwcap 0x... / hwcap2 0x...   (aarch64: getauxval)
 * Exit status 0 on success, 2 on an architecture it does not know.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_FLAGS 64

struct flag_list {
    const char *names[MAX_FLAGS];
    int count;
};

static void add_flag(struct flag_list *list, int present, const char *name) {
    if (present && list->count < MAX_FLAGS) {
        list->names[list->count++] = name;
    }
}

static void print_flags(const char *key, const struct flag_list *list) {
    printf("%s", key);
    for (int i = 0; i < list->count; i++) {
        printf(" %s", list->names[i]);
    }
    printf("\n");
}

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

#define BIT(reg, n) (((reg) >> (n)) & 1u)

static uint64_t read_xcr0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

/* 1 when the kernel lets this process use AMX tile data (Linux asks processes to request it). */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    uint64_t granted = 0;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        return 0;
    }
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &granted) != 0) {
        return 0;
    }
    return (int)((granted >> XFEATURE_XTILEDATA) & 1u);
#else
    return 0;
#endif
}

static int probe(void) {
    uint32_t a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    uint32_t b7 = 0, c7 = 0, d7 = 0, a71 = 0, d71 = 0, tmp = 0;
    uint32_t cx_ext = 0, b24 = 0;
    unsigned max_leaf = __get_cpuid_max(0, 0);
    unsigned max_ext = __get_cpuid_max(0x80000000u, 0);

    __get_cpuid(1, &a1, &b1, &c1, &d1);
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, tmp, b7, c7, d7);
        __cpuid_count(7, 1, a71, tmp, tmp, d71);
    }
    if (max_ext >= 0x80000001u) {
        __cpuid(0x80000001u, tmp, tmp, cx_ext, tmp);
    }
    int has_avx10 = (int)BIT(d71, 19);
    if (has_avx10 && max_leaf >= 0x24) {
        __cpuid_count(0x24, 0, tmp, b24, tmp, tmp);
    }

    int osxsave = (int)BIT(c1, 27);
    uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    int ymm_on = (xcr0 & 0x6) == 0x6;               /* SSE + AVX state */
    int zmm_on = ymm_on && (xcr0 & 0xe0) == 0xe0;   /* opmask, ZMM_Hi256, Hi16_ZMM */
    int tile_on = (xcr0 & 0x60000) == 0x60000;      /* XTILECFG + XTILEDATA */

    struct {
        const char *name;
        int cpuid;
        int os_state;
    } table[] = {
        {"pni", (int)BIT(c1, 0), 1},
        {"ssse3", (int)BIT(c1, 9), 1},
        {"fma", (int)BIT(c1, 12), ymm_on},
        {"cx16", (int)BIT(c1, 13), 1},
        {"sse4_1", (int)BIT(c1, 19), 1},
        {"sse4_2", (int)BIT(c1, 20), 1},
        {"movbe", (int)BIT(c1, 22), 1},
        {"popcnt", (int)BIT(c1, 23), 1},
        {"xsave", (int)BIT(c1, 26), 1},
        {"avx", (int)BIT(c1, 28), ymm_on},
        {"f16c", (int)BIT(c1, 29), ymm_on},
        {"lahf_lm", (int)BIT(cx_ext, 0), 1},
        {"abm", (int)BIT(cx_ext, 5), 1},
        {"bmi1", (int)BIT(b7, 3), 1},
        {"avx2", (int)BIT(b7, 5), ymm_on},
        {"bmi2", (int)BIT(b7, 8), 1},
        {"avx512f", (int)BIT(b7, 16), zmm_on},
        {"avx512dq", (int)BIT(b7, 17), zmm_on},
        {"avx512cd", (int)BIT(b7, 28), zmm_on},
        {"avx512bw", (int)BIT(b7, 30), zmm_on},
        {"avx512vl", (int)BIT(b7, 31), zmm_on},
        {"avx512_vnni", (int)BIT(c7, 11), zmm_on},
        {"avx_vnni", (int)BIT(a71, 4), ymm_on},
        {"avx512_bf16", (int)BIT(a71, 5), zmm_on},
        {"amx_bf16", (int)BIT(d7, 22), tile_on},
        {"amx_tile", (int)BIT(d7, 24), tile_on},
        {"amx_int8", (int)BIT(d7, 25), tile_on},
        {"avx10", has_avx10, ymm_on},
    };
    struct flag_list advertised = {{0}, 0};
    struct flag_list usable = {{0}, 0};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        add_flag(&advertised, table[i].cpuid, table[i].name);
        add_flag(&usable, table[i].cpuid && table[i].os_state, table[i].name);
    }

    struct flag_list known = {{0}, 0};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        add_flag(&known, 1, table[i].name);
    }
    printf("arch x86_64\n");
    print_flags("known", &known);
    print_flags("cpuid_flags", &advertised);
    print_flags("flags", &usable);
    printf("xcr0 0x%llx\n", (unsigned long long)xcr0);
    printf("avx10_version %u\n", has_avx10 ? (b24 & 0xffu) : 0u);
    printf("amx_permitted %d\n", tile_on && BIT(d7, 24) ? amx_permitted() : 0);
    return 0;
}

#elif defined(__aarch64__)
#include <sys/auxv.h>

/* Bit numbers from the kernel's uapi asm/hwcap.h, repeated for older headers. */
#define CPUPROBE_HWCAP_FPHP (1ul << 9)
#define CPUPROBE_HWCAP_ASIMD (1ul << 1)
#define CPUPROBE_HWCAP_ASIMDHP (1ul << 10)
#define CPUPROBE_HWCAP_ASIMDDP (1ul << 20)
#define CPUPROBE_HWCAP_SVE (1ul << 22)
#define CPUPROBE_HWCAP2_SVE2 (1ul << 1)
#define CPUPROBE_HWCAP2_I8MM (1ul << 13)
#define CPUPROBE_HWCAP2_BF16 (1ul << 14)

static int probe(void) {
    unsigned long hwcap = getauxval(AT_HWCAP);
    unsigned long hwcap2 = getauxval(AT_HWCAP2);
    struct flag_list usable = {{0}, 0};
    add_flag(&usable, (hwcap & CPUPROBE_HWCAP_ASIMD) != 0, "asimd");
    add_flag(&usable, (hwcap & CPUPROBE_HWCAP_FPHP) != 0, "fphp");
    add_flag(&usable, (hwcap & CPUPROBE_HWCAP_ASIMDHP) != 0, "asimdhp");
    add_flag(&usable, (hwcap & CPUPROBE_HWCAP_ASIMDDP) != 0, "asimddp");
    add_flag(&usable, (hwcap & CPUPROBE_HWCAP_SVE) != 0, "sve");
    add_flag(&usable, (hwcap2 & CPUPROBE_HWCAP2_SVE2) != 0, "sve2");
    add_flag(&usable, (hwcap2 & CPUPROBE_HWCAP2_I8MM) != 0, "i8mm");
    add_flag(&usable, (hwcap2 & CPUPROBE_HWCAP2_BF16) != 0, "bf16");
    printf("arch aarch64\n");
    printf("known asimd fphp asimdhp asimddp sve sve2 i8mm bf16\n");
    print_flags("flags", &usable);
    printf("hwcap 0x%lx\nhwcap2 0x%lx\n", hwcap, hwcap2);
    return 0;
}

#else
static int probe(void) {
    fprintf(stderr, "cpuprobe: this architecture is not one the probe knows\n");
    return 2;
}
#endif

int main(int argc, char **argv) {
    (void)argv;
    if (argc > 1) {
        fprintf(stderr, "usage: cpuprobe (takes no arguments)\n");
        return 64;
    }
    return probe();
}
