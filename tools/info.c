/*
 * flashattn info: what this build and this machine offer.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "device.h"
#include "flashattn.h"
#include "machine.h"
#include "parallel.h"

int cli_info_main(int argc, char **argv) {
    for (int i = 0; i < argc; ++i) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: flashattn info\n\nPrints the version, the backends built and usable here, the CPU\n"
                   "features the library detected, the thread count and the GPUs found.\n");
            return 0;
        }
        fprintf(stderr, "flashattn info: unknown flag '%s' (info takes no flags)\n", argv[i]);
        return 2;
    }
    printf("flashattn %s\n", fa_version());
    printf("backends:\n");
    const fa_backend all[] = {FA_BACKEND_REFERENCE, FA_BACKEND_CPU, FA_BACKEND_CUDA, FA_BACKEND_CUDA_SM80};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        printf("  %-10s %s\n", fa_backend_name(all[i]), fa_backend_available(all[i]) ? "available" : "not available");
    const char *features = cli_machine_features();
    printf("cpu features: %s\n", features && features[0] ? features : "(none detected)");
    printf("threads: %d (online cores; the default for CPU calls)\n", cli_cpu_count());
    int n = fa_cuda_device_count();
    printf("gpus: %d\n", n);
    for (int i = 0; i < n; ++i) {
        char name[256] = "";
        int major = 0, minor = 0;
        if (fa_cuda_device_info(i, name, sizeof name, &major, &minor) == FA_OK)
            printf("  %d: %s (compute capability %d.%d)\n", i, name, major, minor);
        else
            printf("  %d: %s\n", i, fa_last_error());
    }
    if (n > 0 && !cli_device_support())
        printf("note: this build of the command cannot allocate GPU memory, so bench/check run on the CPU\n");
    return 0;
}
