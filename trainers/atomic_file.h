/* trainers/atomic_file.h: files that appear whole or not at all, for the checkpoints.
 *
 * A file is written under a temporary name in its final directory (NAME.tmp.PID), flushed
 * to the disk with fsync, renamed over NAME (rename within one directory is atomic, POSIX
 * rename(2)), and then the directory itself is fsynced so that the new name survives a
 * power loss too (fsync(2): "calling fsync() on the file does not ensure that the entry in
 * the directory containing the file has also reached disk"). A crash at any point leaves
 * the old NAME or the new one, never a mix; at worst a stray NAME.tmp.PID, which the
 * checkpoint code removes later. Every byte written is also added to a 64-bit FNV-1a
 * checksum (Fowler, Noll, Vo; offset basis and prime of the 64-bit variant), the checksum
 * weft's checkpoints store.
 *
 * Not thread-safe on one gpt_afile; distinct files may be written from distinct threads.
 */
#ifndef WEFT_TRAINERS_ATOMIC_FILE_H
#define WEFT_TRAINERS_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GPT_FNV1A_INIT 0xcbf29ce484222325ull

/* The 64-bit FNV-1a hash h extended by n bytes at p (start from GPT_FNV1A_INIT). */
uint64_t gpt_fnv1a(uint64_t h, const void *p, size_t n);

typedef struct gpt_afile {
  FILE *f;
  char path[4096], tmp[4200];
  uint64_t sum;   /* FNV-1a of every byte written so far */
  uint64_t bytes; /* bytes written so far */
  int error;      /* errno of the first failed write, 0 while none failed */
} gpt_afile;

/* Creates path's temporary (the directory must exist). Returns -1 with "cannot create
 * TMP: REASON" in err. */
int gpt_afile_open(gpt_afile *a, const char *path, char *err, size_t errlen);
/* Appends n bytes (and hashes them). A failure is remembered and reported by commit. */
void gpt_afile_write(gpt_afile *a, const void *p, size_t n);
/* fflush, fsync, close, rename over path, fsync the directory. On any failure removes the
 * temporary (path keeps its old content) and returns -1 with "writing PATH failed: REASON". */
int gpt_afile_commit(gpt_afile *a, char *err, size_t errlen);
/* Closes and removes the temporary; path keeps its old content. */
void gpt_afile_abort(gpt_afile *a);

/* fsync of a directory, so that entries created or renamed in it are on disk. -1 with
 * the reason in err. */
int gpt_fsync_dir(const char *dir, char *err, size_t errlen);
/* mkdir (0777 & ~umask) unless it exists as a directory, then fsync of its parent. */
int gpt_mkdir_durable(const char *dir, char *err, size_t errlen);

#endif
