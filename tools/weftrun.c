/*
 * weftrun: weft's single-host launcher.
 *
 *   weftrun -n N [--grace SEC|none] [--timeout SEC] [--bind-to auto|core|package|none] [--version]
 *           [--] program [args...]
 *
 * It creates the job's unique id, which starts the bootstrap root as a thread of
 * weftrun itself (so the root lives exactly as long as the job), then forks N ranks
 * with WEFT_UNIQUE_ID, WEFT_RANK, WEFT_NRANKS, WEFT_LOCAL_RANK and WEFT_LOCAL_SIZE in
 * their environment; weft_comm_init_from_env() reads them.
 *
 * Failure policy: when a rank fails, the root tells the others, which normally fail
 * fast on their own; weftrun only steps in after a grace period (SIGTERM, then SIGKILL
 * 2 s later). Each rank leads its own process group, which weftrun signals as a whole,
 * so processes a rank started go too; ranks get PR_SET_PDEATHSIG so that even a
 * SIGKILLed weftrun leaves no orphan rank. (Being outside the terminal's foreground
 * group, ranks should not read a terminal's stdin.) Multi-host jobs use mpirun or srun
 * instead: weft_comm_init_from_env() understands their environments too.
 *
 * Placement follows mpirun's defaults (tools/weftrun_bind.c): cores for two ranks or fewer
 * (CPUs / N of them each: a rank has two busy threads), a package above that; when the ranks outnumber the CPUs (one warning says so)
 * rank r goes on the (r mod n)-th CPU, where mpirun would leave them unbound, as the
 * scheduler then left 3 of 4 ranks on one of 2 CPUs for seconds; --bind-to overrides. Pinned, a rank's threads (its caller and its stream's
 * progress thread) share one core instead of wandering onto the other rank's, which on the
 * 2-core VM made queued small-message loops bimodal between launches (0.35 vs 3-4 us per
 * 8-byte broadcast; pinned: 0.34 in 5 of 6 launches).
 *
 * Signals are handled synchronously: SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked
 * and collected with sigtimedwait(), whose timeout is the next deadline, so there is
 * no handler and no race between a signal and the wait.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/weftrun_bind.h"
#include "weft.h"

#define KILL_DELAY_S 2.0

extern char **environ;

struct rank {
  pid_t pid;
  int running;
};

struct job {
  int nranks;
  struct rank *ranks;
  int nrunning;
  int first_failure;   /* exit code of the first rank that failed, 0 while none did */
  double grace_s;      /* after a failure, how long the others may finish alone; < 0: no limit */
  double term_at;      /* when to send SIGTERM to the ranks still running; 0 = never */
  double kill_at;      /* when to send SIGKILL; 0 = never */
  double timeout_at;   /* --timeout deadline; 0 = none */
  int killing;         /* weftrun itself is terminating the ranks */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
  fprintf(f,
          "Usage: weftrun -n N [options] [--] program [args...]\n"
          "Starts N ranks of program on this host for a weft job.\n\n"
          "  -n, -np, --np N    number of ranks (required)\n"
          "      --grace SEC    after a rank fails, let the others exit on their own for\n"
          "                     SEC seconds before SIGTERM (then SIGKILL 2 s later); default 30;\n"
          "                     none: never end them (a job that survives a lost rank, e.g.\n"
          "                     weft-train-ddp --elastic)\n"
          "      --timeout SEC  kill the whole job after SEC seconds (exit status 124)\n"
          "      --bind-to WHAT auto (default, as mpirun): cores for <= 2 ranks (CPUs/N\n"
          "                     each), package above, core when ranks outnumber the CPUs\n"
          "                     (mpirun: none; here the CPUs carry equal shares); core: rank r\n"
          "                     on the r-th allowed CPU (mod their number); package: that\n"
          "                     CPU's package;\n"
          "                     none: unbound. With more ranks than CPUs and no --bind-to,\n"
          "                     weftrun warns once\n"
          "      --version      weft's version\n"
          "  -h, --help         this help\n\n"
          "Each rank gets WEFT_UNIQUE_ID, WEFT_RANK, WEFT_NRANKS, WEFT_LOCAL_RANK and\n"
          "WEFT_LOCAL_SIZE; weft_comm_init_from_env() reads them. SIGINT and SIGTERM are\n"
          "forwarded to the ranks. Exit status: 0 if every rank exited 0, else the first\n"
          "failing rank's status (128 + signal number when killed by a signal).\n"
          "weftrun is single-host: for several hosts, launch with mpirun or srun.\n");
}

static void print_version(void) {
  int v = 0;
  weft_get_version(&v);
  printf("weftrun (weft) %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
}

/* mpirun's "-np N" (one dash, two letters) as getopt's "--np N". Only before the program:
 * its own arguments are left alone. */
static void normalize_np(int argc, char **argv) {
  static char np[] = "--np";
  for (int i = 1; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "--") == 0) return;
    if (strcmp(argv[i], "-np") == 0) argv[i] = np;
    if (strcmp(argv[i], "-n") == 0 || strcmp(argv[i], "--np") == 0 || strcmp(argv[i], "--grace") == 0 ||
        strcmp(argv[i], "--timeout") == 0 || strcmp(argv[i], "--bind-to") == 0)
      i++; /* skip the option's value */
  }
}

static int parse_seconds(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  /* finite only: "inf" would make every deadline sum infinite (--grace none is the way) */
  if (errno || end == s || *end || !(v >= 0 && v <= 1e9))
    return -1;
  *out = v;
  return 0;
}

/* Builds rank's environment: ours minus any stale launcher variables, plus the new
 * ones, which live in one block right after the pointer array (one free). Done before
 * fork so that the child only has to exec. */
static char **rank_environ(const char *id, int rank, int nranks) {
  static const char *ours[] = {"WEFT_UNIQUE_ID=", "WEFT_RANK=", "WEFT_NRANKS=",
                               "WEFT_LOCAL_RANK=", "WEFT_LOCAL_SIZE="};
  enum { NOURS = 5, VARBYTES = WEFT_UNIQUE_ID_STRING_BYTES + 160 };
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = malloc((n + NOURS + 1) * sizeof(*env) + VARBYTES);
  if (!env)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int stale = 0;
    for (size_t j = 0; j < NOURS; j++)
      stale |= strncmp(environ[i], ours[j], strlen(ours[j])) == 0;
    if (!stale)
      env[k++] = environ[i];
  }
  char *p = (char *)(env + n + NOURS + 1);
  const long val[NOURS] = {0, rank, nranks, rank, nranks};
  for (int j = 0; j < NOURS; j++) {
    env[k++] = p;
    p += (j == 0 ? sprintf(p, "%s%s", ours[j], id) : sprintf(p, "%s%ld", ours[j], val[j])) + 1;
  }
  env[k] = NULL;
  return env;
}

/* In the child: own process group, parent's signal mask undone, die with weftrun, exec. */
static void exec_rank(char **argv, char **env, const sigset_t *oldmask, pid_t parent) {
  setpgid(0, 0);
  sigprocmask(SIG_SETMASK, oldmask, NULL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) /* weftrun died before prctl took effect */
    _exit(127);
  execvpe(argv[0], argv, env);
  fprintf(stderr, "weftrun: cannot run '%s': %s\n", argv[0], strerror(errno));
  _exit(127);
}

/* Each rank leads its own process group, so this reaches what the rank started too. */
static void signal_ranks(struct job *job, int sig) {
  for (int r = 0; r < job->nranks; r++)
    if (job->ranks[r].running)
      kill(-job->ranks[r].pid, sig);
}

static void list_running(const struct job *job, FILE *f) {
  for (int r = 0; r < job->nranks; r++)
    if (job->ranks[r].running)
      fprintf(f, " %d", r);
  fputc('\n', f);
}

/* Starts SIGTERM now and SIGKILL later, once. */
static void terminate_job(struct job *job) {
  if (job->killing)
    return;
  job->killing = 1;
  signal_ranks(job, SIGTERM);
  job->term_at = 0;
  job->kill_at = now_s() + KILL_DELAY_S;
}

static void rank_exited(struct job *job, int r, int status) {
  job->ranks[r].running = 0;
  job->nrunning--;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 0 || job->killing)
    return;
  if (WIFEXITED(status))
    fprintf(stderr, "weftrun: rank %d (pid %d) exited with status %d\n", r,
            (int)job->ranks[r].pid, code);
  else
    fprintf(stderr, "weftrun: rank %d (pid %d) killed by signal SIG%s\n", r,
            (int)job->ranks[r].pid, sigabbrev_np(WTERMSIG(status)) ?: "?");
  if (job->first_failure)
    return;
  job->first_failure = code;
  if (job->grace_s >= 0)
    job->term_at = now_s() + job->grace_s;
}

static void reap(struct job *job) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
    for (int r = 0; r < job->nranks; r++)
      if (job->ranks[r].pid == pid && job->ranks[r].running)
        rank_exited(job, r, status);
}

/* SIGINT/SIGTERM/SIGHUP sent to weftrun (a tty's Ctrl-C included: the ranks are not
 * in the terminal's process group) go to the ranks; a second one escalates to SIGKILL. */
static void on_signal(struct job *job, int sig, int *nforwarded) {
  signal_ranks(job, sig);
  if (++*nforwarded > 1) {
    signal_ranks(job, SIGKILL);
    job->killing = 1;
  }
}

/* The earliest pending deadline, or 0. */
static double next_deadline(const struct job *job) {
  double d = 0;
  const double c[3] = {job->term_at, job->kill_at, job->timeout_at};
  for (int i = 0; i < 3; i++)
    if (c[i] > 0 && (d == 0 || c[i] < d))
      d = c[i];
  return d;
}

static void on_deadlines(struct job *job) {
  double t = now_s();
  if (job->timeout_at > 0 && t >= job->timeout_at) {
    fprintf(stderr, "weftrun: timeout: killing the job; ranks still running:");
    list_running(job, stderr);
    job->timeout_at = 0;
    if (!job->first_failure)
      job->first_failure = 124;
    terminate_job(job);
  }
  if (job->term_at > 0 && t >= job->term_at) {
    fprintf(stderr, "weftrun: grace period over, terminating ranks still running:");
    list_running(job, stderr);
    terminate_job(job);
  }
  if (job->kill_at > 0 && t >= job->kill_at) {
    signal_ranks(job, SIGKILL);
    job->kill_at = 0;
  }
}

static void supervise(struct job *job, const sigset_t *set) {
  int nforwarded = 0;
  while (job->nrunning > 0) {
    double d = next_deadline(job), wait = d > 0 ? d - now_s() : 3600;
    if (wait < 0)
      wait = 0;
    struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
    int sig = sigtimedwait(set, NULL, &ts);
    if (sig == SIGCHLD)
      reap(job);
    else if (sig > 0)
      on_signal(job, sig, &nforwarded);
    reap(job); /* SIGCHLDs coalesce; never miss an exit */
    on_deadlines(job);
  }
}

static int launch(struct job *job, char **argv, const char *id, const sigset_t *oldmask,
                  enum weftrun_bind bind) {
  pid_t self = getpid();
  for (int r = 0; r < job->nranks; r++) {
    char **env = rank_environ(id, r, job->nranks);
    if (!env) {
      fprintf(stderr, "weftrun: out of memory\n");
      return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      weftrun_bind_rank(bind, r, job->nranks);
      exec_rank(argv, env, oldmask, self);
    }
    if (pid > 0)
      setpgid(pid, pid); /* also here, so that signal_ranks can never miss the group */
    free(env);
    if (pid < 0) {
      fprintf(stderr, "weftrun: fork of rank %d: %s\n", r, strerror(errno));
      return -1;
    }
    job->ranks[r].pid = pid;
    job->ranks[r].running = 1;
    job->nrunning++;
  }
  return 0;
}

int main(int argc, char **argv) {
  enum { OPT_GRACE = 256, OPT_TIMEOUT, OPT_BIND, OPT_VERSION };
  static const struct option opts[] = {{"np", required_argument, NULL, 'n'},
                                       {"grace", required_argument, NULL, OPT_GRACE},
                                       {"timeout", required_argument, NULL, OPT_TIMEOUT},
                                       {"bind-to", required_argument, NULL, OPT_BIND},
                                       {"version", no_argument, NULL, OPT_VERSION},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int nranks = 0, c, bind = BIND_AUTO;
  double grace = 30, timeout = 0;
  char *end;
  argv[0] = (char *)"weftrun"; /* getopt's messages: not the libtool ".libs/" path */
  normalize_np(argc, argv);
  while ((c = getopt_long(argc, argv, "+n:h", opts, NULL)) != -1) {
    switch (c) {
    case 'n':
      nranks = (int)strtol(optarg, &end, 10);
      if (*end || nranks < 1) {
        fprintf(stderr, "weftrun: -n needs a positive number of ranks, got '%s'\n", optarg);
        return 2;
      }
      break;
    case OPT_GRACE:
    case OPT_TIMEOUT:
      if (c == OPT_GRACE && strcmp(optarg, "none") == 0) {
        grace = -1;
        break;
      }
      if (parse_seconds(optarg, c == OPT_GRACE ? &grace : &timeout) < 0) {
        fprintf(stderr, "weftrun: --%s needs seconds from 0 to 1e9%s, got '%s'\n",
                c == OPT_GRACE ? "grace" : "timeout", c == OPT_GRACE ? " or none" : "", optarg);
        return 2;
      }
      break;
    case OPT_BIND:
      bind = weftrun_bind_parse(optarg);
      if (bind < 0) {
        fprintf(stderr, "weftrun: --bind-to takes auto, core, package or none, got '%s'\n", optarg);
        return 2;
      }
      break;
    case OPT_VERSION:
      print_version();
      return 0;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (nranks < 1 || optind >= argc) {
    fprintf(stderr, "weftrun: %s\n", nranks < 1 ? "-n N is required" : "no program given");
    usage(stderr);
    return 2;
  }

  /* Blocked before weft_get_unique_id starts the root thread, which inherits the mask:
   * otherwise a SIGCHLD or SIGINT could be delivered to that thread instead. */
  sigset_t set, oldmask;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, &oldmask);

  weft_unique_id_t uid;
  char id[WEFT_UNIQUE_ID_STRING_BYTES];
  weft_status_t st = weft_get_unique_id(&uid);
  if (st == WEFT_SUCCESS)
    st = weft_unique_id_to_string(&uid, id);
  if (st != WEFT_SUCCESS) {
    fprintf(stderr, "weftrun: cannot create the job's unique id: %s: %s\n",
            weft_get_error_string(st), weft_get_last_error(NULL));
    return 1;
  }

  int ncpus = weftrun_allowed_cpus();
  if (nranks > ncpus && bind == BIND_AUTO) /* a placement asked for is not second-guessed */
    fprintf(stderr, "weftrun: %d ranks on %d CPUs: ranks outnumber cores, so they take turns "
            "(waits yield); rank r runs on the (r mod %d)-th CPU (--bind-to none: unbound)\n",
            nranks, ncpus, ncpus);
  struct job job = {.nranks = nranks, .grace_s = grace};
  job.ranks = calloc(nranks, sizeof(*job.ranks));
  if (!job.ranks) {
    fprintf(stderr, "weftrun: out of memory\n");
    return 1;
  }
  if (timeout > 0)
    job.timeout_at = now_s() + timeout;
  if (launch(&job, argv + optind, id, &oldmask, weftrun_bind_resolve(bind, nranks, ncpus)) < 0) {
    job.first_failure = 1;
    terminate_job(&job);
  }
  supervise(&job, &set);
  free(job.ranks);
  return job.first_failure;
}
