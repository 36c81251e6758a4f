/* trainers/test_spawn.h: a trainer launched in the background, so a test can SIGKILL one
 * of its ranks mid-run (test_ckpt_relaunch.c).
 *
 * ts_spawn runs `weftrun --timeout T -n N ./PROG --data DATA ARGS` from the build
 * directory (test_util.h) with stdout and stderr in DIR/out; the returned pid is weftrun's
 * itself, whose children are the ranks, each with WEFT_RANK in its environment. Every
 * wait here has a deadline.
 */
#ifndef WEFT_TRAINERS_TEST_SPAWN_H
#define WEFT_TRAINERS_TEST_SPAWN_H

#include <sys/types.h>

/* Starts the job; asserts the fork worked. extra_env ("NAME=VALUE" or NULL) is added to
 * the environment of weftrun and the ranks. */
pid_t ts_spawn(const char *dir, int nranks, const char *prog, int timeout_s, const char *args, const char *extra_env);

/* Launches prog on nranks as torchrun does, without weftrun: each rank a process of its
 * own with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, rank
 * 0 hosting the bootstrap root. Output in DIR/out; returns 0 when every rank exited 0. */
int ts_launch_torchrun(const char *dir, int nranks, const char *prog, int timeout_s, const char *args);

/* The pid of rank `rank` of the job launcher started, within timeout_s; asserts it exists. */
pid_t ts_rank_pid(pid_t launcher, int rank, double timeout_s);

/* Waits until path exists; fails (echoing DIR/out) when the job ends first or after
 * timeout_s. */
void ts_wait_for_file(pid_t job, const char *dir, const char *path, double timeout_s);

/* Waits for the job to end within timeout_s (else SIGKILLs it and fails); returns its
 * wait status. */
int ts_wait(pid_t job, double timeout_s);

#endif
