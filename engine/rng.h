// The engine's random numbers: Philox lives in common/rng.h so that data/
// (shuffling, augmentation) can use the same generator without depending on
// the engine. Kept so that engine code can keep including "engine/rng.h".
#ifndef YOKE_ENGINE_RNG_H_
#define YOKE_ENGINE_RNG_H_

#include "common/rng.h"

#endif  // YOKE_ENGINE_RNG_H_
