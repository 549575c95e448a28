#include "mbkit/data/catalog.hpp"

#include "mbkit/util/strings.hpp"

namespace mbkit::data {
namespace {

std::vector<CatalogEntry> make_catalog() {
  std::vector<CatalogEntry> entries;

  CatalogEntry mnist;
  mnist.name = "mnist";
  mnist.title = "MNIST handwritten digits (LeCun, Cortes, Burges)";
  mnist.format = SourceFormat::kIdx;
  // yann.lecun.com has refused downloads since 2021; the PyTorch mirror serves the same files.
  mnist.mirrors = {"https://ossci-datasets.s3.amazonaws.com/mnist/",
                   "http://yann.lecun.com/exdb/mnist/"};
  mnist.files = {{"train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", 9912422, ""},
                 {"train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", 28881, ""},
                 {"t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", 1648877, ""},
                 {"t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", 4542, ""}};
  mnist.num_classes = 10;
  mnist.class_names = {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
  mnist.homepage = "http://yann.lecun.com/exdb/mnist/";
  entries.push_back(mnist);

  CatalogEntry fashion;
  fashion.name = "fashion-mnist";
  fashion.title = "Fashion-MNIST article images (Zalando Research)";
  fashion.format = SourceFormat::kIdx;
  fashion.mirrors = {"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"};
  // Content SHA-256s are of the decompressed IDX bytes (the published archives and Debian's
  // copies hold the same deflate stream; Debian dropped the gzip name field).
  fashion.files = {{"train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d", 26421880,
                    "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"},
                   {"train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe", 29515,
                    "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"},
                   {"t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79", 4422102,
                    "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"},
                   {"t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310", 5148,
                    "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"}};
  fashion.num_classes = 10;
  fashion.class_names = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                         "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  fashion.system_directory = "/usr/share/datasets/fashion-mnist";
  fashion.system_package = "dataset-fashion-mnist";
  fashion.homepage = "https://github.com/zalandoresearch/fashion-mnist";
  entries.push_back(fashion);

  CatalogEntry cifar10;
  cifar10.name = "cifar10";
  cifar10.title = "CIFAR-10 tiny images, 10 classes (Krizhevsky)";
  cifar10.format = SourceFormat::kCifar10;
  cifar10.mirrors = {"https://www.cs.toronto.edu/~kriz/"};
  cifar10.files = {{"cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530", 170052171, ""}};
  cifar10.num_classes = 10;
  cifar10.class_names = {"airplane", "automobile", "bird",  "cat",  "deer",
                         "dog",      "frog",       "horse", "ship", "truck"};
  cifar10.homepage = "https://www.cs.toronto.edu/~kriz/cifar.html";
  entries.push_back(cifar10);

  CatalogEntry cifar100;
  cifar100.name = "cifar100";
  cifar100.title = "CIFAR-100 tiny images, 100 classes in 20 superclasses (Krizhevsky)";
  cifar100.format = SourceFormat::kCifar100;
  cifar100.mirrors = {"https://www.cs.toronto.edu/~kriz/"};
  cifar100.files = {{"cifar-100-binary.tar.gz", "03b5dce01913d631647c71ecec9e9cb8", 168513733, ""}};
  cifar100.num_classes = 100;
  cifar100.num_coarse_classes = 20;
  // Used when an archive lacks fine_label_names.txt / coarse_label_names.txt.
  cifar100.class_names = {
      "apple",       "aquarium_fish", "baby",      "bear",       "beaver",       "bed",
      "bee",         "beetle",        "bicycle",   "bottle",     "bowl",         "boy",
      "bridge",      "bus",           "butterfly", "camel",      "can",          "castle",
      "caterpillar", "cattle",        "chair",     "chimpanzee", "clock",        "cloud",
      "cockroach",   "couch",         "crab",      "crocodile",  "cup",          "dinosaur",
      "dolphin",     "elephant",      "flatfish",  "forest",     "fox",          "girl",
      "hamster",     "house",         "kangaroo",  "keyboard",   "lamp",         "lawn_mower",
      "leopard",     "lion",          "lizard",    "lobster",    "man",          "maple_tree",
      "motorcycle",  "mountain",      "mouse",     "mushroom",   "oak_tree",     "orange",
      "orchid",      "otter",         "palm_tree", "pear",       "pickup_truck", "pine_tree",
      "plain",       "plate",         "poppy",     "porcupine",  "possum",       "rabbit",
      "raccoon",     "ray",           "road",      "rocket",     "rose",         "sea",
      "seal",        "shark",         "shrew",     "skunk",      "skyscraper",   "snail",
      "snake",       "spider",        "squirrel",  "streetcar",  "sunflower",    "sweet_pepper",
      "table",       "tank",          "telephone", "television", "tiger",        "tractor",
      "train",       "trout",         "tulip",     "turtle",     "wardrobe",     "whale",
      "willow_tree", "wolf",          "woman",     "worm"};
  cifar100.coarse_class_names = {"aquatic_mammals",
                                 "fish",
                                 "flowers",
                                 "food_containers",
                                 "fruit_and_vegetables",
                                 "household_electrical_devices",
                                 "household_furniture",
                                 "insects",
                                 "large_carnivores",
                                 "large_man-made_outdoor_things",
                                 "large_natural_outdoor_scenes",
                                 "large_omnivores_and_herbivores",
                                 "medium_mammals",
                                 "non-insect_invertebrates",
                                 "people",
                                 "reptiles",
                                 "small_mammals",
                                 "trees",
                                 "vehicles_1",
                                 "vehicles_2"};
  cifar100.homepage = "https://www.cs.toronto.edu/~kriz/cifar.html";
  entries.push_back(cifar100);
  return entries;
}

}  // namespace

const std::vector<CatalogEntry>& catalog() {
  static const std::vector<CatalogEntry> entries = make_catalog();
  return entries;
}

const CatalogEntry* find_catalog_entry(const std::string& name) {
  for (const auto& entry : catalog()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::string known_dataset_names() {
  std::vector<std::string> names;
  for (const auto& entry : catalog()) names.push_back(entry.name);
  return join(names, ", ");
}

}  // namespace mbkit::data
