/* trainers/test_spawn.c: background launches and the pids of their ranks; see test_spawn.h. */
#include "trainers/test_spawn.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* cmocka.h needs the headers above first. */
#include <cmocka.h>

#include "trainers/test_util.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  nanosleep(&ts, NULL);
}

pid_t ts_spawn(const char *dir, int nranks, const char *prog, int timeout_s, const char *args, const char *extra_env) {
  char cmd[16384], out[4200];
  snprintf(cmd, sizeof(cmd), "exec ./weftrun --timeout %d -n %d ./%s --data '%s' %s", timeout_s, nranks, prog,
           tu_data_path(), args);
  snprintf(out, sizeof(out), "%s/out", dir);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid > 0) return pid;
  int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0 || chdir(tu_build_dir())) _exit(127);
  dup2(fd, 1);
  dup2(fd, 2);
  if (extra_env) putenv((char *)extra_env);
  execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
  _exit(127);
}

/* A TCP port of 127.0.0.1 nobody listens on now (the kernel's pick). */
static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  assert_true(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

int ts_launch_torchrun(const char *dir, int nranks, const char *prog, int timeout_s, const char *args) {
  char cmd[20000];
  snprintf(cmd, sizeof(cmd),
           "cd '%s' && (pids=; for r in $(seq 0 %d); do RANK=$r LOCAL_RANK=$r WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 "
           "MASTER_PORT=%d timeout %d ./%s --data '%s' %s & pids=\"$pids $!\"; done; rc=0; "
           "for p in $pids; do wait $p || rc=1; done; exit $rc) >%s/out 2>&1",
           tu_build_dir(), nranks - 1, nranks, free_port(), timeout_s, prog, tu_data_path(), args, dir);
  int rc = system(cmd);
  if (rc) {
    snprintf(cmd, sizeof(cmd), "sed 's/^/# /' %s/out", dir);
    if (system(cmd)) fprintf(stderr, "# (no output)\n");
  }
  return rc;
}

/* The parent pid in /proc/PID/stat (after the command name's closing parenthesis). */
static pid_t parent_of(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  int ppid;
  return p && sscanf(p + 1, " %*c %d", &ppid) == 1 ? (pid_t)ppid : -1;
}

/* Whether pid's environment holds WEFT_RANK=rank. */
static int has_rank(pid_t pid, int rank) {
  char path[64], buf[65536], want[32];
  snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
  snprintf(want, sizeof(want), "WEFT_RANK=%d", rank);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  for (size_t i = 0; i < n; i += strlen(buf + i) + 1)
    if (!strcmp(buf + i, want)) return 1;
  return 0;
}

static pid_t find_rank(pid_t launcher, int rank) {
  DIR *d = opendir("/proc");
  pid_t found = -1;
  for (struct dirent *e; d && found < 0 && (e = readdir(d));) {
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid > 0 && parent_of(pid) == launcher && has_rank(pid, rank)) found = pid;
  }
  if (d) closedir(d);
  return found;
}

pid_t ts_rank_pid(pid_t launcher, int rank, double timeout_s) {
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(2)) {
    pid_t pid = find_rank(launcher, rank);
    if (pid > 0) return pid;
  }
  fail_msg("rank %d of job %d not found", rank, (int)launcher);
  return -1;
}

static void echo_out(const char *dir) {
  char cmd[4300];
  snprintf(cmd, sizeof(cmd), "sed 's/^/# /' %s/out", dir);
  if (system(cmd)) fprintf(stderr, "# (no output)\n");
}

void ts_wait_for_file(pid_t job, const char *dir, const char *path, double timeout_s) {
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(2)) {
    if (access(path, F_OK) == 0) return;
    int st;
    if (waitpid(job, &st, WNOHANG) == job) {
      echo_out(dir);
      fail_msg("the job ended (status %d) before %s appeared", st, path);
    }
  }
  kill(job, SIGKILL);
  waitpid(job, NULL, 0);
  echo_out(dir);
  fail_msg("%s did not appear within %.0f s", path, timeout_s);
}

int ts_wait(pid_t job, double timeout_s) {
  int st;
  for (double end = now_s() + timeout_s; now_s() < end; nap_ms(5))
    if (waitpid(job, &st, WNOHANG) == job) return st;
  kill(job, SIGKILL);
  waitpid(job, &st, 0);
  fail_msg("job %d still running after %.0f s", (int)job, timeout_s);
  return st;
}
