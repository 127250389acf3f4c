/* Programs started by an augefs owner (docs/DESIGN.md §12.3, exec and spawn): inherited
 * augefs descriptors and a working directory inside augefs reach programs started with
 * posix_spawn, posix_spawnp, system, popen, vfork + exec and the execl family. Prints
 * "spawn ok" from the program it finally becomes (execle). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void check(int ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "FAIL %s: %s\n", what, strerror(errno));
        exit(1);
    }
}

static void wait_ok(pid_t pid, const char *what) {
    int st = 0;
    check(waitpid(pid, &st, 0) == pid, what);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "FAIL %s: status %d\n", what, st);
        exit(1);
    }
}

static const char *slurp(const char *path) {
    static char buf[4096];
    int fd = open(path, O_RDONLY);
    check(fd >= 0, path);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    check(n >= 0, "read");
    buf[n] = 0;
    close(fd);
    return buf;
}

static void same(const char *path, const char *want) {
    const char *got = slurp(path);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "FAIL %s: got [%s] want [%s]\n", path, got, want);
        exit(1);
    }
}

int main(void) {
    check(mkdir("/augefs/sp", 0755) == 0, "mkdir");

    /* posix_spawnp: an augefs file (close-on-exec here) as the child's standard output
     * through a file action; the offset is shared with the parent's descriptor. */
    int out = open("/augefs/sp/out", O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    check(out >= 0, "open out");
    check(write(out, "parent\n", 7) == 7, "write parent");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    char *echo[] = {"echo", "spawned", NULL};
    pid_t pid;
    check(posix_spawnp(&pid, "echo", &fa, NULL, echo, environ) == 0, "posix_spawnp");
    wait_ok(pid, "spawned echo");
    posix_spawn_file_actions_destroy(&fa);
    check(write(out, "after\n", 6) == 6, "write after");
    close(out);
    same("/augefs/sp/out", "parent\nspawned\nafter\n");

    /* posix_spawn: a descriptor inherited as it is (no close-on-exec). */
    int keep = open("/augefs/sp/keep", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(keep >= 0, "open keep");
    char cmd[64];
    snprintf(cmd, sizeof cmd, "echo inherited >&%d", keep);
    char *sh[] = {"sh", "-c", cmd, NULL};
    check(posix_spawn(&pid, "/bin/sh", NULL, NULL, sh, environ) == 0, "posix_spawn");
    wait_ok(pid, "spawned sh");
    close(keep);
    same("/augefs/sp/keep", "inherited\n");

    /* system and popen, with the working directory inside augefs. */
    check(chdir("/augefs/sp") == 0, "chdir");
    check(system("echo sys > s.txt && cat keep >> s.txt && pwd > where") == 0, "system");
    same("/augefs/sp/s.txt", "sys\ninherited\n");
    same("where", "/augefs/sp\n");
    FILE *r = popen("cat s.txt", "r");
    check(r != NULL, "popen r");
    char line[64];
    check(fgets(line, sizeof line, r) && strcmp(line, "sys\n") == 0, "popen read");
    check(pclose(r) == 0, "pclose r");
    FILE *w = popen("cat > p.txt", "w");
    check(w != NULL, "popen w");
    fputs("through popen\n", w);
    check(pclose(w) == 0, "pclose w");
    same("p.txt", "through popen\n");

    /* vfork + execl with an augefs descriptor as standard output. */
    int v = open("v.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(v >= 0, "open v");
    pid = vfork();
    if (pid == 0) {
        dup2(v, 1);
        execl("/bin/echo", "echo", "vforked", (char *)NULL);
        _exit(127);
    }
    check(pid > 0, "vfork");
    wait_ok(pid, "vforked echo");
    close(v);
    same("v.txt", "vforked\n");

    /* fork + execlp, and the owner becoming another program with execle: a descriptor
     * and the working directory are handed over, the environment is the one given. */
    pid = fork();
    if (pid == 0) {
        int f = open("lp.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (f < 0 || dup2(f, 1) < 0)
            _exit(126);
        execlp("echo", "echo", "execlp", (char *)NULL);
        _exit(127);
    }
    check(pid > 0, "fork");
    wait_ok(pid, "forked execlp");
    same("lp.txt", "execlp\n");
    int last = open("le.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    check(last >= 0, "open le");
    char script[160];
    snprintf(script, sizeof script,
             "echo \"$MARK\" >&%d && cat le.txt p.txt v.txt && echo spawn ok", last);
    char *env[] = {"MARK=from execle", "PATH=/usr/bin:/bin", NULL};
    execle("/bin/sh", "sh", "-c", script, (char *)NULL, env);
    check(0, "execle");
    return 1;
}
