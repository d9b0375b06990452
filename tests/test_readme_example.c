/*
 * The README's usage example: examples/basic.c must build (CMake does that),
 * run and print its line, and README.md must quote the file verbatim.
 * Usage: test_readme_example [path of the built example, default: example_basic
 * in this program's directory]
 */
#define _POSIX_C_SOURCE 200809L /* popen */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed, skipped;

static void check(int ok, const char *name, const char *detail) {
    printf("%-4s %s  %s\n", ok ? "ok" : "FAIL", name, detail);
    if (ok) ++passed;
    else ++failed;
}

/* Whole file as a NUL-terminated string, or NULL. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = s ? fread(s, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!s) return NULL;
    s[got] = '\0';
    return s;
}

int main(int argc, char **argv) {
    /* The example program: the argument, else example_basic beside this program. */
    char exe[4096];
    if (argc >= 2) {
        snprintf(exe, sizeof exe, "%s", argv[1]);
    } else {
        const char *slash = strrchr(argv[0], '/');
        int dir = slash ? (int)(slash - argv[0]) + 1 : 0;
        snprintf(exe, sizeof exe, "%.*sexample_basic", dir, argv[0]);
    }
    FILE *probe = fopen(exe, "rb");
    if (!probe) {
        printf("skip examples/basic.c runs  %s not found\n", exe);
        ++skipped;
    } else {
        fclose(probe);
        /* Run the example and capture its line. */
        char cmd[4200], line[512] = "";
        snprintf(cmd, sizeof cmd, "\"%s\"", exe);
        FILE *p = popen(cmd, "r");
        if (p) {
            if (!fgets(line, sizeof line, p)) line[0] = '\0';
            while (fgetc(p) != EOF) {
            }
        }
        int rc = p ? pclose(p) : -1;
        line[strcspn(line, "\n")] = '\0';
        /* The first query row sees only key 0 (causal), so out[0] is v[0] = -0.5. */
        int ran = rc == 0 && strncmp(line, "flashattn ", 10) == 0 && strstr(line, "out[0] = -0.500000") != NULL;
        check(ran, "examples/basic.c runs", line[0] ? line : "(no output)");
    }

    char *example = read_file(FA_EXAMPLE_SOURCE);
    char *readme = read_file(FA_README);
    if (!example) {
        check(0, "README quotes examples/basic.c", "cannot read " FA_EXAMPLE_SOURCE);
    } else if (!readme) {
        printf("skip README quotes examples/basic.c  README.md does not exist yet\n");
        ++skipped;
    } else {
        check(strstr(readme, example) != NULL, "README quotes examples/basic.c",
              strstr(readme, example) ? "verbatim" : "README.md does not contain the file's text verbatim");
    }
    free(example);
    free(readme);
    if (skipped) printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
