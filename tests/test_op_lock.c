/* test_op_lock: the communicator's operation lock (lib/op_lock.h): exclusion under
 * contention, try while held, and a sleeping waiter that gets the lock when it is released. */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>
#include "lib/op_lock.h"

enum { THREADS = 4, ROUNDS = 100000 };

static weft__op_lock lock;
static long counter; /* deliberately not atomic: only the lock keeps the increments whole */

static void *add_many(void *arg) {
  for (int i = 0; i < ROUNDS; i++) {
    weft__op_lock_take(&lock);
    long v = counter;
    if (i % 1024 == 0) sched_yield(); /* hold it across a yield now and then: real contention */
    counter = v + 1;
    weft__op_lock_release(&lock);
  }
  return arg;
}

static void threads_that_increment_under_the_lock_lose_no_increment(void **state) {
  weft__op_lock_init(&lock);
  counter = 0;
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, add_many, NULL), 0);
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  assert_int_equal(counter, (long)THREADS * ROUNDS);
  assert_int_equal(atomic_load(&lock.word), 0);
}

static void try_fails_while_held_and_succeeds_after_release(void **state) {
  weft__op_lock_init(&lock);
  assert_true(weft__op_lock_try(&lock));
  assert_false(weft__op_lock_try(&lock));
  weft__op_lock_release(&lock);
  assert_true(weft__op_lock_try(&lock));
  weft__op_lock_release(&lock);
  assert_int_equal(atomic_load(&lock.word), 0);
}

static _Atomic int waiter_has_it;

static void *take_and_note(void *arg) {
  weft__op_lock_take(&lock);
  atomic_store(&waiter_has_it, 1);
  weft__op_lock_release(&lock);
  return arg;
}

static void a_waiter_that_went_to_sleep_gets_the_lock_when_it_is_released(void **state) {
  weft__op_lock_init(&lock);
  atomic_store(&waiter_has_it, 0);
  weft__op_lock_take(&lock);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, take_and_note, NULL), 0);
  /* The waiter yields WEFT__OP_LOCK_SPINS times, then marks the word 2 and sleeps. */
  struct timespec nap = {0, 1000000};
  int marked = 0;
  for (int i = 0; i < 5000 && !marked; i++) {
    marked = atomic_load(&lock.word) == 2;
    if (!marked) nanosleep(&nap, NULL);
  }
  assert_true(marked);
  assert_int_equal(atomic_load(&waiter_has_it), 0); /* held: it must not have it yet */
  weft__op_lock_release(&lock);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(atomic_load(&waiter_has_it), 1);
  assert_int_equal(atomic_load(&lock.word), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(threads_that_increment_under_the_lock_lose_no_increment),
      cmocka_unit_test(try_fails_while_held_and_succeeds_after_release),
      cmocka_unit_test(a_waiter_that_went_to_sleep_gets_the_lock_when_it_is_released),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
