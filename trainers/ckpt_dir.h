/* trainers/ckpt_dir.h: the checkpoint directory of --checkpoint-dir DIR, one subdirectory
 * per saved step:
 *
 *     DIR/step-00000040/manifest                         written last (ckpt_manifest.h)
 *     DIR/step-00000040/shard-00000-of-00004.<save id>   one per rank (ckpt_shard.h)
 *     ...
 *
 * A checkpoint is COMPLETE when its manifest reads back (checksum line included) and every
 * shard it lists exists with the listed size; shard checksums are verified when the state
 * is read (ckpt.h). A save that died before its manifest leaves an incomplete directory,
 * which resolution skips and pruning removes once a later save completes.
 */
#ifndef WEFT_TRAINERS_CKPT_DIR_H
#define WEFT_TRAINERS_CKPT_DIR_H

#include <stddef.h>

#include "trainers/ckpt_manifest.h"

/* "ROOT/step-%08ld". */
void gpt_ckpt_step_dir(char *out, size_t n, const char *root, long step);

/* Reads dir's manifest into m and checks every listed shard is there with its size.
 * -1 with the reason naming the file in err (m is then freed). */
int gpt_ckpt_check_complete(const char *dir, gpt_ckpt_manifest *m, char *err, size_t errlen);

/* What --resume PATH names: a single-file checkpoint (checkpoint.h; *is_file = 1), one
 * checkpoint (a step-N directory, or any directory holding a manifest), or a checkpoint
 * directory, of which the complete checkpoint with the highest step is taken (each newer,
 * incomplete one is named on stderr with the reason it was skipped). out gets
 * the file or the checkpoint's directory. -1 with the reason in err: PATH missing, the
 * checkpoint named is incomplete, or the directory holds no complete checkpoint (the
 * newest incomplete one and why is named). */
int gpt_ckpt_resolve(const char *path, char *out, size_t outlen, int *is_file, char *err, size_t errlen);

/* Call once step's checkpoint is complete. Keeps the `keep` complete checkpoints with the
 * highest steps (0: all), always step's own; removes the other complete ones, incomplete
 * ones of lower steps, and the files in step's directory its manifest does not list
 * (shards of an earlier, unfinished save of the same step, temporaries). -1 with the
 * first failure in err; it goes on removing what it can. */
int gpt_ckpt_prune(const char *root, long step, int keep, char *err, size_t errlen);

#endif
